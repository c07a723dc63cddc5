-- The `sandstack` commands of a session over time (docs/lifecycle.md): pause, resume,
-- hibernate, wake, snapshot, fork, snapshots. Each finds its stack by project name through the
-- record kept on the engine (sandstack.docker.open). run(cmd, argv, out, errout, docker) returns
-- the exit code: 0 done, 1 failed (one line on stderr), 2 usage.
local M = {}

M.HELP = {
  pause = "pause PROJECT                  freeze every container of PROJECT (memory kept)",
  resume = "resume PROJECT                 thaw every container of PROJECT",
  hibernate = "hibernate PROJECT [--timeout S] stop PROJECT's containers but its proxy; files, networks kept",
  wake = "wake PROJECT                   start a hibernated PROJECT again; prints the new endpoint",
  snapshot = "snapshot PROJECT [--name N] [--json]  the sandbox's files and volumes as a snapshot; prints its id",
  fork = "fork PROJECT NEW_KEY [--api-key-env VAR] [--json]  snapshot PROJECT and start NEW_KEY from it",
  snapshots = "snapshots [--source PROJECT] [--json] | snapshots rm ID...  list or remove snapshots",
}
M.ORDER = { "pause", "resume", "hibernate", "wake", "snapshot", "fork", "snapshots" }

-- argv[from..] -> positional list, flags (a value each; `json` and `help` take none), or nil, msg
local BOOL = { json = true, help = true }
local function parse(argv, from, flags)
  local pos, opt, i = {}, {}, from
  while i <= #argv do
    local a = argv[i]
    local key = a:match("^%-%-([%w%-]+)$")
    if a == "-h" then key = "help" end
    if key then
      if not flags[key] and not BOOL[key] then return nil, "unknown option --" .. key end
      if BOOL[key] then
        opt[key] = true
        i = i + 1
      else
        if argv[i + 1] == nil then return nil, "--" .. key .. " needs a value" end
        opt[key] = argv[i + 1]
        i = i + 2
      end
    else
      pos[#pos + 1] = a
      i = i + 1
    end
  end
  return pos, opt
end

function M.run(cmd, argv, out, errout, docker)
  local core = require "sandstack.core"
  local function fail(err)
    errout:write("sandstack ", cmd, ": ", (tostring(err):gsub("\n", " ")), "\n")
    return 1
  end
  local function usage(msg)
    errout:write("sandstack ", cmd, ": ", msg, "\nusage: sandstack ", M.HELP[cmd], "\n")
    return 2
  end
  local flags = { hibernate = { timeout = true }, snapshot = { name = true }, fork = { ["api-key-env"] = true },
    snapshots = { source = true } }
  local pos, opt = parse(argv, 2, flags[cmd] or {})
  if not pos then return usage(opt) end
  if opt.help then
    out:write("usage: sandstack ", M.HELP[cmd], "\n")
    return 0
  end
  if cmd == "snapshots" then
    if pos[1] == "rm" then
      if #pos < 2 then return usage("snapshots rm needs at least one ID") end
      local ids = {}
      for i = 2, #pos do ids[#ids + 1] = pos[i] end
      local removed, err = docker.remove_snapshot(ids)
      if not removed then return fail(err) end
      for _, id in ipairs(removed) do out:write("removed ", id, "\n") end
      return 0
    end
    if #pos > 0 then return usage("unexpected " .. pos[1]) end
    local list, err = docker.snapshots { source = opt.source }
    if not list then return fail(err) end
    if opt.json then out:write(core.json_encode(list), "\n"); return 0 end
    out:write(("%-20s %-24s %-36s %s\n"):format("ID", "NAME", "SOURCE", "CREATED"))
    for _, s in ipairs(list) do
      out:write(("%-20s %-24s %-36s %s\n"):format(s.id, tostring(s.name), tostring(s.source),
        s.created and os.date("!%Y-%m-%d %H:%M:%S", s.created) or "?"))
    end
    return 0
  end
  local project = pos[1]
  if not project then return usage("needs a PROJECT") end
  if cmd == "fork" and not pos[2] then return usage("needs a NEW_KEY") end
  if #pos > (cmd == "fork" and 2 or 1) then return usage("unexpected " .. pos[#pos]) end
  local stack, err = docker.open(project)
  if not stack then return fail(err) end
  local ok, a, b
  if cmd == "pause" or cmd == "resume" then
    ok, a = stack[cmd](stack)
  elseif cmd == "hibernate" then
    local t = opt.timeout and tonumber(opt.timeout)
    if opt.timeout and (not t or t < 0) then stack:close(); return usage("--timeout must be a number of seconds >= 0") end
    ok, a = stack:hibernate { timeout = t }
  elseif cmd == "wake" then
    ok, a = stack:wake()
    if ok then out:write("endpoint ", tostring(stack.endpoint), "\n") end
  elseif cmd == "snapshot" then
    ok, a = stack:snapshot { name = opt.name }
    if ok then out:write(opt.json and core.json_encode(ok) or ok.id, "\n") end
  elseif cmd == "fork" then
    local o = { project_name = pos[2] }
    if opt["api-key-env"] then
      o.api_key = os.getenv(opt["api-key-env"])
      if not o.api_key then stack:close(); return usage("$" .. opt["api-key-env"] .. " is not set") end
    end
    ok, a, b = stack:fork(pos[2], o)
    if ok then
      if opt.json then out:write(core.json_encode({ project = ok.project, endpoint = ok.endpoint, snapshot = a.id }), "\n")
      else out:write(("project  %s\nendpoint %s\nsnapshot %s\n"):format(ok.project, ok.endpoint, a.id)) end
      ok:close()
    else
      a = a or b
    end
  end
  stack:close()
  if not ok then return fail(a) end
  if cmd == "pause" or cmd == "resume" or cmd == "hibernate" then out:write(cmd, "d ", project, "\n") end
  return 0
end

return M
