-- sandstack status NAME: each service's state and health, and the agent's endpoint.
local ops = require "sandstack.engine.ops"
local kit = require "sandstack.cli_kit"

return {
  order = 40,
  summary = "state and health of each service of one stack, and its endpoint",
  usage = "status NAME [--json]",
  help = [[NAME is the stack's session key or its project name.]],
  json = true,
  run = function(ctx, args, opt)
    local s, code = ctx:named(args)
    if not s then return code end
    local eng, err = require("sandstack").engine {}
    if not eng then return ctx:fail(err) end
    local names = {}
    for svc in pairs(s.services) do names[#names + 1] = svc end
    table.sort(names)
    local rows, endpoint = {}, nil
    for _, svc in ipairs(names) do
      local info = ops.call(eng, "inspect_container", s.project .. "-" .. svc)
      local st = type(info) == "table" and info.State or {}
      local row = { service = svc, state = st.Status or s.services[svc] or kit.NULL,
        health = st.Health and st.Health.Status or kit.NULL }
      local labels = type(info) == "table" and info.Config and info.Config.Labels or {}
      local port = labels["io.sandstack.port"]
      local ports = type(info) == "table" and info.NetworkSettings and info.NetworkSettings.Ports
      local bind = port and type(ports) == "table" and ports[port .. "/tcp"]
      if type(bind) == "table" and bind[1] then
        endpoint = "http://127.0.0.1:" .. bind[1].HostPort
        row.endpoint = endpoint
      end
      rows[#rows + 1] = row
    end
    eng:close()
    if opt.json then
      return ctx:json { project = s.project, session_key = s.session_key or kit.NULL, pool = s.pool or kit.NULL,
        created = s.created or kit.NULL, endpoint = endpoint or kit.NULL, services = kit.array(rows) }
    end
    ctx.out:write(("project %s  session %s  age %s\n"):format(s.project, s.session_key or "-", kit.age(s.created)))
    for _, r in ipairs(rows) do
      local health = r.health ~= kit.NULL and r.health or ""
      ctx.out:write(("%-12s %-8s %s%s\n"):format(r.service, tostring(r.state), health,
        r.endpoint and (" endpoint " .. r.endpoint) or ""))
    end
    return 0
  end,
}
