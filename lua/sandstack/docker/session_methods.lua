-- The start options of a stack over time (ttl, idle_timeout, on_expiry, from_snapshot), the
-- stack's record and its reopening, wake by record, and reap's routes (the handle's methods
-- over time are docker/handle_lifecycle.lua's).
local E = require "sandstack.error"
local snapshot = require "sandstack.docker.snapshot"
local expiry = require "sandstack.docker.expiry"

local M = {}

-- The start options this file takes on top of the start pipeline's (csrc/stack/validate.c):
-- they are taken off before the pipeline sees the options.
M.START_KEYS = E.described {
  { "ttl", type = "seconds from the end of the start", default = "none",
    refused = "not above 0" },
  { "idle_timeout", type = "seconds", default = "none",
    refused = "not above 0" },
  { "on_expiry", type = "`\"destroy\"` or `\"hibernate\"`", default = "destroy",
    refused = "another value" },
  { "from_snapshot", type = "a snapshot record", default = "none",
    refused = "its image or volumes are gone (`engine`)" },
}

-- The one start of sandstack.docker with the options of this file: plain is the start pipeline
-- (docker/start.lua's start). The handle keeps the options without a secret (snapshot.spec_of)
-- and each service's env by name only (docker/record_env.lua) for its snapshots, and its record is kept on the engine (keep_record); a ttl, idle_timeout or
-- on_expiry is written to the engine before the stack is handed out (a failure to write either
-- removes the stack again).
function M.start(session_key, opts, plain)
  if type(opts) ~= "table" then return plain(session_key, opts) end
  local ttl, idle, on_expiry = opts.ttl, opts.idle_timeout, opts.on_expiry
  local ok, err = expiry.check(ttl, idle, on_expiry, "sandstack.docker.start")
  if not ok then return nil, err end
  if opts.from_snapshot ~= nil then
    return snapshot.start_from(session_key, opts, { start = function(k, o) return M.start(k, o, plain) end,
      plan = require("sandstack.docker.start").plan })
  end
  return require("sandstack.expiry").start(session_key, opts, M.START_KEYS, plain, function(stack, clean)
    stack.spec = M.spec_of(clean)
    local ok, err = M.keep_record(stack)
    -- on_expiry alone is kept too: a later set_timeout acts by it
    if ok and (ttl or idle or on_expiry) then ok, err = expiry.arm(stack, ttl, idle, on_expiry) end
    return ok, err
  end)
end

-- sandstack.docker.start(session_key, opts), and a fork's start of its child: M.start over the
-- start pipeline, required on first use (the pipeline's handle mixes in this file's methods).
local function pipeline(session_key, opts)
  return require("sandstack.docker.start").start(session_key, opts, nil)
end
function M.start_stack(session_key, opts) return M.start(session_key, opts, pipeline) end

-- What a handle keeps of its start's options for its snapshots and forks, and puts in its record:
-- the options without a secret (snapshot.spec_of), each service's env by name only
-- (docker/record_env.lua). A warm pool's claim keeps the same of the options its stack was made
-- with and the session's own (docker/pool.lua).
function M.spec_of(opts)
  return require("sandstack.docker.record_env").withhold(snapshot.spec_of(opts))
end

-- The stack's record on the engine, so any process knows it by its project name alone
-- (sandstack.docker.open, the CLI): a volume <project>-record whose label io.sandstack.record is
-- stack:record() as JSON (no secret: the record is scrubbed). It carries the project label, so
-- destroy removes it.
local RECORD = "io.sandstack.record"
function M.keep_record(stack)
  local core = require "sandstack.core"
  local batch = require "sandstack.stack.batch"
  local r = batch.run(stack.eng, core.session_requests("create_volume", { stack.project .. "-record" }, { labels = {
    ["io.sandstack.project"] = stack.project, ["io.sandstack.session"] = stack.session_key,
    ["io.sandstack.role"] = "record", [RECORD] = core.json_encode(stack:record()) } }), 60)[1]
  if not r.ok then return nil, r.err end
  return true
end

-- sandstack.docker.open(name, opts) -> a handle on a stack by its project name or its session
-- key, from the record kept on the engine (the start's, or a warm pool's claim's: its volume
-- <project>-claim carries the record too), then reconnect; or nil, err: engine/not_found, or
-- invalid/ambiguous when the key is held by more than one stack. The project's volumes and the
-- key's are listed in one round.
local function records_of(body, match)
  local out, core = {}, require "sandstack.core"
  for _, v in ipairs(type(body) == "table" and type(body.Volumes) == "table" and body.Volumes or {}) do
    local l = type(v) == "table" and type(v.Labels) == "table" and v.Labels or {}
    local role = l["io.sandstack.role"]
    if (role == "record" or role == "claim") and l[RECORD] and match(l) then
      local rec = core.json_decode(l[RECORD])
      if type(rec) == "table" and type(rec.project) == "string" then out[rec.project] = rec end
    end
  end
  return out
end

function M.open(reconnect, name, opts)
  E.want(name, "string", "sandstack.docker.open", "argument 'name'", "a string (a project or a session key)")
  if name == nil then E.raise("sandstack.docker.open: argument 'name' must be a string (a project or a session key), got nil") end
  local err
  opts, err = E.options(opts, require("sandstack.docker.handle").RECONNECT_KEYS, "sandstack.docker.open")
  if not opts then return nil, err end
  local core = require "sandstack.core"
  local batch = require "sandstack.stack.batch"
  local eng; eng, err = require("sandstack").engine { host = opts.docker_host, timeout = opts.timeout }
  if not eng then return nil, err end
  local R = core.session_requests
  local r = batch.run(eng, { R("list_volumes", nil, { label = "io.sandstack.project=" .. name })[1],
    R("list_volumes", nil, { label = "io.sandstack.session=" .. name })[1] }, 60)
  eng:close()
  err = batch.first_error(r)
  if err then return nil, err end
  local by_project = records_of(r[1].body, function(l) return l["io.sandstack.project"] == name end)
  local rec = by_project[name]
  if not rec then
    local found = {}
    for project, x in pairs(records_of(r[2].body, function(l) return l["io.sandstack.session"] == name end)) do
      found[#found + 1] = project
      rec = x
    end
    if #found > 1 then
      table.sort(found)
      return E.fail("invalid", "ambiguous", ("session key %s is held by %d stacks (%s): open one by its project")
        :format(name, #found, table.concat(found, ", ")), { projects = found })
    end
  end
  if not rec then
    return E.fail("engine", "not_found", "no record of stack " .. name .. " on this engine: no stack has this "
      .. "project name or session key, or an older sandstack started it (sandstack ls lists the stacks)",
      { project = name })
  end
  return reconnect(rec, opts)
end

-- sandstack.docker.wake(record, opts): reconnect (docker/handle.lua) and wake.
function M.wake(reconnect, record, opts)
  local stack, err = reconnect(record, opts)
  if not stack then return nil, err end
  local ok; ok, err = stack:wake()
  if not ok then stack:close(); return nil, err end
  return stack
end

local REAP_EXPIRED = { docker_host = true, timeout = true, project = true, prefix = true, pool = true, expired = true }

local REAP_SNAPSHOTS = { docker_host = true, timeout = true, prefix = true, older_than = true, snapshots = true }

-- reap{snapshots = true, prefix =, older_than =}: removes the snapshots whose source project
-- starts with prefix and/or that are older than older_than seconds (all, without either);
-- returns the ids removed.
local function reap_snapshots(opts)
  local list, err = snapshot.list { docker_host = opts.docker_host, timeout = opts.timeout }
  if not list then return nil, err end
  local ids, t = {}, os.time()
  for _, s in ipairs(list) do
    local match = not opts.prefix or (s.source or ""):sub(1, #opts.prefix) == opts.prefix
    local old = not opts.older_than or (s.created and t - s.created >= opts.older_than)
    if match and old then ids[#ids + 1] = s.id end
  end
  if #ids == 0 then return {} end
  return snapshot.remove(ids, { docker_host = opts.docker_host, timeout = opts.timeout })
end

-- reap{expired = true, ...}: the expiry's pass (docker/expiry.lua); reap{snapshots = true}: the
-- snapshots; any other reap is the inventory's.
function M.reap(opts, plain)
  if type(opts) == "table" and opts.snapshots and not opts.expired then
    return reap_snapshots(E.check_keys(opts, REAP_SNAPSHOTS, "sandstack.docker.reap"))
  end
  return require("sandstack.expiry").route(opts, REAP_EXPIRED, "sandstack.docker.reap", expiry.reap, plain)
end

return M
