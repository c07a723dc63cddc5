-- The spawned processes' entries on the engine (internal to docker/process.lua, whose
-- register, list and attach these are): what lets h:processes() and h:attach(id) find a spawn
-- from any process, and forget it once it has ended. The wire is docker/process.lua's `io`.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

-- The spawn's entry on the engine, so that h:processes() and h:attach(id) find it from any
-- process: a volume <project>-spawn-<id> whose labels carry the stack's project (destroy removes
-- it) and what a detached process needs (the exec id, its token for kill, its service, tty,
-- start time). The argv is the engine's own (its exec inspect). Removed once the spawner sees the
-- exit code, or by the next listing that finds the exec ended.
local SPAWN_LABEL, PROJECT_LABEL = "io.sandstack.spawn", "io.sandstack.project"

local function entry_name(project, id) return project .. "-spawn-" .. id:sub(1, 24) end

function M.register(p, project, service)
  local method, path = ops.target("create_volume", entry_name(project, p.id))
  local ok, err = p.io.call(method, path, { Name = entry_name(project, p.id), Labels = {
    [PROJECT_LABEL] = project, ["io.sandstack.role"] = "spawn", [SPAWN_LABEL] = core.json_encode({ id = p.id,
      token = p.token, service = service, container = p.container, tty = p.tty, started = p.started }) } },
    { timeout = p.timeout })
  if not ok then return nil, err end
  p.entry, p.service = entry_name(project, p.id), service
  return true
end

function M.forget(io, name, timeout)
  local method, path = ops.target("remove_volume", name)
  io.call(method, path, nil, { timeout = timeout, ok = { [404] = true } })
end

-- The entries of project: { { name =, id =, token =, service =, container =, tty =, started = } }.
local function entries(io, project)
  local r = ops.request("list_volumes_with_labels", nil, { labels = { PROJECT_LABEL .. "=" .. project,
    "io.sandstack.role=spawn" } })
  local list, err = io.call(r.method, r.path, nil, { query = r.query })
  if not list then return nil, err end
  local out = {}
  for _, v in ipairs(type(list) == "table" and type(list.Volumes) == "table" and list.Volumes or {}) do
    local l = type(v.Labels) == "table" and v.Labels or {}
    local e = l[PROJECT_LABEL] == project and type(l[SPAWN_LABEL]) == "string" and core.json_decode(l[SPAWN_LABEL])
    if type(e) == "table" and type(e.id) == "string" and type(e.token) == "string" then
      e.name = v.Name
      out[#out + 1] = e
    end
  end
  return out
end

local function argv_of(info)
  local pc = type(info.ProcessConfig) == "table" and info.ProcessConfig or {}
  local argv = { pc.entrypoint }
  for _, a in ipairs(type(pc.arguments) == "table" and pc.arguments or {}) do argv[#argv + 1] = a end
  return argv
end

-- h:processes(): the live spawned processes of project, oldest first: { { id =, argv =, started =,
-- service =, tty = } }. An entry whose exec has ended (or that the engine forgot) is removed.
function M.list(io, project)
  local es, err = entries(io, project)
  if not es then return nil, err end
  local out = {}
  for _, e in ipairs(es) do
    local method, path = ops.target("inspect_exec", e.id)
    local info, ierr = io.call(method, path)
    if info and info.Running == true then
      out[#out + 1] = { id = e.id, argv = argv_of(info), started = e.started, service = e.service, tty = e.tty == true }
    elseif info or (ierr and ierr.status == 404) then
      M.forget(io, e.name)
    else
      return nil, ierr
    end
  end
  table.sort(out, function(a, b)
    if a.started ~= b.started then return (a.started or 0) < (b.started or 0) end
    return a.id < b.id
  end)
  return out
end

-- h:attach(id): the process of that spawn, as h:spawn returned it. The one this handle spawned,
-- when it still holds it (live: id -> process), with its output; else a process made from the
-- entry on the engine, whose wait, kill and resize work and whose read and write return
-- unsupported/detached (made by detached(fields): docker/process.lua's Process). nil, err:
-- invalid/unknown_process when no spawn of the stack has that id.
function M.attach(io, project, id, live, detached)
  E.want(id, "string", "attach", "argument 'id'", "a process id from spawn or processes()")
  if id == nil then E.raise("attach: argument 'id' must be a process id from spawn or processes(), got nil") end
  if id == "" then return E.refuse("attach", "argument 'id'", "must be a process id from spawn or processes()") end
  local p = live and live[id]
  if p and p.conn then return p end
  local es, err = entries(io, project)
  if not es then return nil, err end
  for _, e in ipairs(es) do
    if e.id == id then
      local method, path = ops.target("inspect_exec", id)
      local info; info, err = io.call(method, path)
      if not info then
        if err and err.status == 404 then M.forget(io, e.name) else return nil, err end
        break
      end
      return detached({ io = io, id = id, container = e.container, tty = e.tty == true, token = e.token,
        timeout = 30, argv = argv_of(info), started = e.started, service = e.service, entry = e.name, detached = true,
        queue = {}, held = 0, timings = {} })
    end
  end
  return E.fail("invalid", "unknown_process", ("stack %s has no spawned process %s (it ended, or was never spawned "
    .. "here: h:processes() lists the live ones)"):format(project, id), { id = id })
end

return M
