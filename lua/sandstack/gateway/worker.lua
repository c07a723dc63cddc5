-- sandstack.gateway.worker: the gateway's blocking half. Every function here runs inside
-- ngx.run_worker_thread, in a Lua VM of the thread pool, never in nginx's event loop.
-- Arguments and results cross between VMs by deep copy and must be plain data; functions
-- return `true, value` or `false, {kind=, reason=, message=}` (the first value nginx hands back
-- only says the call ran). Thread VMs are reused, so this module keeps no state.
--
-- What makes a stack a gateway session, and lets a restarted nginx find it again: a marker, a
-- container named <project>-gw, created and never started (no process, no network), labelled
--   io.sandstack.project=<project>   so that removing the project removes the marker with it
--   io.sandstack.role=gateway, io.sandstack.gateway=<node name>
--   io.sandstack.gateway.session/.tenant/.created  the session's key, tenant and birth
--   io.sandstack.gateway.secret-sha256  the digest of the session secret, never the secret
--   io.sandstack.gateway.record         the stack's record (stack:record(), JSON)
-- The marker is made after the stack is ready: a stack of this gateway without one was mid-start
-- when nginx went away, and adoption rolls it back.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local result = require "sandstack.gateway.worker_result"

local guarded, plain_error = result.guarded, result.plain_error

local M = {}

local MARK = "io.sandstack.gateway"

local function docker() return require("sandstack").docker end

local function engine(host, timeout)
  return require("sandstack").engine { host = host, timeout = timeout }
end

local function forwarder_name(record)
  for _, c in ipairs(record.containers or {}) do
    if c.service == record.forwarder then return c.name end
  end
  return record.project .. "-" .. tostring(record.forwarder)
end

-- The marker of one session (above). Its image is the forwarder's, which the engine has.
local function mark(record, meta)
  local eng, err = engine(record.docker_host, record.timeout)
  if not eng then return nil, err end
  local info; info, err = ops.call(eng, "inspect_container", forwarder_name(record))
  if not info then eng:close(); return nil, err end
  local body = { Image = info.Config and info.Config.Image or info.Image, Entrypoint = { "true" },
    NetworkDisabled = true, HostConfig = { NetworkMode = "none" },
    Labels = { ["io.sandstack.project"] = record.project, ["io.sandstack.role"] = "gateway",
      ["io.sandstack.version"] = core.VERSION, [MARK] = meta.node, [MARK .. ".session"] = meta.key,
      [MARK .. ".tenant"] = meta.tenant, [MARK .. ".created"] = tostring(meta.created),
      [MARK .. ".secret-sha256"] = meta.digest, [MARK .. ".record"] = core.json_encode(record) } }
  local ok; ok, err = ops.call(eng, "create_container", record.project .. "-gw", { body = body })
  eng:close()
  if not ok then return nil, err end
  return true
end

-- The stack's record, marked; a stack that cannot be marked is destroyed (it could never be
-- found again after a restart, and the client is told the start failed).
local function finish(stack, meta)
  -- a pooled stack answered early completes its claim here: a claim lost meanwhile is the error
  -- (the pool took the stack down already), and only the handle is closed
  local record, err = stack:record()
  if not record then
    stack:close()
    return nil, err
  end
  local ok; ok, err = mark(record, meta)
  if not ok then
    stack:destroy()
    stack:close()
    return nil, err
  end
  stack:close() -- the handle's Engine connection; the stack keeps running
  return record
end

-- A fork: a snapshot of the parent that the child owns (within the tenant's snapshot quota,
-- meta.snapshot_quota: gateway/snapshots_worker.lua), then the child's start from it. The
-- snapshot's volume copies go once the child has started; its image stays, for the child's
-- sandbox runs it, and goes with the child (worker.destroy). On failure it goes at once.
local function fork(key, opts, meta)
  local SW = require "sandstack.gateway.snapshots_worker"
  local parent, err = docker().reconnect(meta.fork_from)
  if not parent then return nil, err end
  local owner = { node = meta.node, tenant = meta.tenant, key = meta.key, created = meta.created }
  -- named by the parent's key as its tenant knows it (the stack's key is "<key>.<tenant>"), never
  -- by its project (a pool's, or the gateway's name for it)
  local parent_key, tail = tostring(parent.session_key), "." .. tostring(meta.tenant)
  if parent_key:sub(-#tail) == tail then parent_key = parent_key:sub(1, -#tail - 1) end
  local snap, bytes = SW.take(parent, meta.fork_from, owner, meta.snapshot_quota, { name = "fork of " .. parent_key })
  parent:close()
  if not snap then return nil, bytes end
  local host, timeout = opts.docker_host, opts.timeout
  -- the parent's own options are in its snapshot: only what a snapshot never keeps
  local stack; stack, err = docker().start(key, { from_snapshot = snap, project_name = opts.project_name,
    api_key = opts.api_key, credentials = opts.credentials, docker_host = host, timeout = timeout })
  local rec
  if stack then
    SW.drop_copies(snap, host, timeout)
    rec, err = finish(stack, meta)
  end
  if not rec then
    SW.remove_snapshot(snap, host, timeout)
    return nil, err
  end
  rec.fork_snapshot = { id = snap.id, name = snap.name, bytes = bytes }
  return rec
end

-- start(sid, opts, meta) -> true, record: a cold start; the sid (gateway/sessions.lua) is the
-- stack's session key, the key and tenant are in meta.
-- meta.fork_from: a session's record; the new one is its fork (above), and the record returned
-- carries fork_snapshot = {id =, name =, bytes =}.
function M.start(key, opts, meta)
  return guarded(function()
    if meta.fork_from then return fork(key, opts, meta) end
    local stack, err = docker().start(key, opts)
    if not stack then return nil, err end
    return finish(stack, meta)
  end)
end

-- acquire(sid, pool_opts, meta) -> true, record: a stack from the warm pool (a cold start
-- labelled with the pool when it is empty).
function M.acquire(key, pool_opts, meta)
  return guarded(function()
    local pool, err = docker().pool(pool_opts)
    if not pool then return nil, err end
    local stack; stack, err = pool:acquire(key)
    if pool.eng then pool.eng:close(); pool.eng = nil end
    if not stack then return nil, err end
    return finish(stack, meta)
  end)
end

-- fill(pool_opts, concurrency) -> true, {started=, replaced=, idle=, claimed=, starting=, failed=,
-- and the same as ready=, in_use=}: one tick of the pool's own server (pool:serve), the one
-- refill mechanism; the gateway's timer only schedules it.
function M.fill(pool_opts, concurrency)
  return guarded(function()
    local pool, err = docker().pool(pool_opts)
    if not pool then return nil, err end
    local server = pool:serve { target_idle = pool_opts.size, max = pool_opts.max, concurrency = concurrency }
    local st, ferr = server:tick()
    if pool.eng then pool.eng:close(); pool.eng = nil end
    if not st then
      st = server.counts
      st.started = ferr and ferr.started or 0
      st.error = plain_error(ferr)
    end
    st.ready, st.in_use = st.idle, st.claimed
    return st
  end)
end

-- reconnect(record) -> true, record with the forwarder's port re-read (nil when stopped).
function M.reconnect(record)
  return guarded(function()
    local stack, err = docker().reconnect(record)
    if not stack then return nil, err end
    local fresh = stack:record()
    stack:close()
    return fresh
  end)
end

-- destroy(record, owner) -> true, {snapshots_left = err | nil}: every object of the project,
-- the marker included; then, given owner = {node, tenant, key, created}, the snapshots that
-- session owns and did not keep (gateway/snapshots_worker.lua). What of those could not go is
-- said, and left to the expiry pass's sweep.
function M.destroy(record, owner)
  return guarded(function()
    local ok, err = docker().down(record.project, { docker_host = record.docker_host, timeout = record.timeout })
    if not ok then return nil, err end
    local out = {}
    if owner then -- the stack is gone whatever happens here: the session leaves the table
      local called, removed, rerr = pcall(require("sandstack.gateway.snapshots_worker").remove_owned, owner.node,
        owner, record.docker_host, record.timeout)
      if not called then rerr, removed = removed, nil end
      if not removed then out.snapshots_left = tostring(type(rerr) == "table" and rerr.message or rerr) end
    end
    return out
  end)
end

-- adopt(a) -> true, {sessions = {...}, rolled_back = {projects}}. a: node, prefix, pool (name or
-- nil), keep (set of the sids the dict already holds: a stack's io.sandstack.session label, or
-- its pool claim's, is its session's sid), docker_host, timeout.
-- Every marked stack of this node is re-read (port included); a stack of this gateway's prefix
-- that has no marker was mid-start and is removed, unless it is an idle pool stack (the pool's)
-- or the dict still knows its key (an in-flight start of a worker that outlived a reload).
function M.adopt(a)
  return guarded(function()
    local eng, err = engine(a.docker_host, a.timeout)
    if not eng then return nil, err end
    local list; list, err = ops.call(eng, "list_containers", nil, { label = "io.sandstack.project" })
    -- a pooled stack claimed by rename names its session in a volume (its claim record)
    local records, rerr
    if list then records, rerr = ops.call(eng, "list_volumes", nil, { label = "io.sandstack.role=claim" }) end
    eng:close()
    if not list then return nil, err end
    if not records then return nil, rerr end
    -- an answer of the wrong shape is an error, never "no stacks": adoption is retried
    local inventory = require "sandstack.docker.inventory"
    if not inventory.is_array(list) then return nil, inventory.bad_answer("container list") end
    local recorded = {}
    for _, v in ipairs(type(records) == "table" and type(records.Volumes) == "table" and records.Volumes or {}) do
      local l = type(v) == "table" and type(v.Labels) == "table" and v.Labels or {}
      if l["io.sandstack.project"] then recorded[l["io.sandstack.project"]] = l["io.sandstack.session"] end
    end
    local projects = {}
    for _, c in ipairs(list) do
      local l = type(c) == "table" and c.Labels or {}
      local p = l["io.sandstack.project"]
      if type(p) == "string" and p:sub(1, #a.prefix) == a.prefix then
        local e = projects[p] or { project = p }
        projects[p] = e
        if l["io.sandstack.role"] == "gateway" then
          e.marker = l
        elseif inventory.mark_role(c) == "claim" then
          -- a renamed ready mark whose record is not written yet is claimed by an unknown session
          e.claim = l["io.sandstack.role"] == "claim" and l["io.sandstack.session"] or recorded[p] or "?"
        end
        e.pool = e.pool or l["io.sandstack.pool"]
        e.session = e.session or l["io.sandstack.session"]
      end
    end
    local out = { sessions = {}, rolled_back = {}, failed = {} }
    for p, e in pairs(projects) do
      local m = e.marker
      if m and m[MARK] == a.node then
        local record = core.json_decode(m[MARK .. ".record"] or "")
        local fresh = type(record) == "table" and select(2, M.reconnect(record))
        if type(fresh) == "table" and fresh.project then
          out.sessions[#out.sessions + 1] = { key = m[MARK .. ".session"], tenant = m[MARK .. ".tenant"],
            digest = m[MARK .. ".secret-sha256"], created = tonumber(m[MARK .. ".created"]), record = fresh }
        else
          out.failed[#out.failed + 1] = p
        end
      elseif not m then
        local key = e.pool and e.claim or e.session
        local idle_pool_stack = e.pool and not e.claim
        if not idle_pool_stack and not (key and a.keep[key]) and e.claim ~= "reap" then
          local ok = docker().down(p, { docker_host = a.docker_host, timeout = a.timeout })
          if ok then out.rolled_back[#out.rolled_back + 1] = p end
        end
      end
    end
    return out
  end)
end

-- health() -> true, {sandstack =, engine_api =}
function M.health(host)
  return guarded(function()
    local eng, err = engine(host)
    if not eng then return nil, err end
    local v, verr = eng:version()
    eng:close()
    if not v then return nil, verr end
    return { sandstack = core.VERSION, engine_api = v.ApiVersion }
  end)
end

return M
