-- sandstack ls: the stacks sandstack owns on the engine, plain stacks first, then each pool.
local kit = require "sandstack.cli_kit"

local function services_text(services)
  local names = {}
  for k, v in pairs(services) do names[#names + 1] = k .. ":" .. tostring(v) end
  table.sort(names)
  return #names > 0 and table.concat(names, " ") or "-"
end

-- The JSON form of one docker.list entry (docs/cli.md, "ls --json").
local function entry(s, now)
  return { project = s.project, session_key = s.session_key or kit.NULL, pool = s.pool or kit.NULL,
    state = s.state or kit.NULL, created = s.created or kit.NULL,
    age_seconds = s.created and math.max(0, now - s.created) or kit.NULL, services = s.services,
    networks = s.networks, volumes = s.volumes }
end

return {
  order = 30,
  summary = "list the stacks sandstack owns on the engine, grouped by pool",
  usage = "ls [--json]",
  help = [[A pool's stack shows its state in place of a session until a session holds it:
(ready), (starting), (failed).]],
  json = true,
  run = function(ctx, args, opt)
    if args[1] then return ctx:usage("ls takes no argument, got " .. args[1]) end
    local stacks, err = ctx:docker().list()
    if not stacks then return ctx:fail(err) end
    local now = os.time()
    if opt.json then
      local list = {}
      for i, s in ipairs(stacks) do list[i] = entry(s, now) end
      return ctx:json { stacks = kit.array(list) }
    end
    local header = ("%-36s %-20s %5s  %s\n"):format("PROJECT", "SESSION", "AGE", "SERVICES")
    ctx.out:write(header)
    local pool
    for _, s in ipairs(stacks) do
      if s.pool and s.pool ~= pool then
        pool = s.pool
        ctx.out:write(("\npool %s\n"):format(pool), header)
      end
      local session = s.session_key or "-"
      if s.pool and s.state ~= "in_use" then session = "(" .. tostring(s.state) .. ")" end
      ctx.out:write(("%-36s %-20s %5s  %s\n"):format(s.project, session, kit.age(s.created, now), services_text(s.services)))
    end
    return 0
  end,
}
