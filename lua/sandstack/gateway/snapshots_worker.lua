-- sandstack.gateway.snapshots_worker: the blocking half of the gateway's snapshots (owner and
-- quota: gateway/snapshot_quota.lua), in the thread pool with gateway/worker_result.lua's contract:
-- plain data in, `true, value` or `false, plain error` out, no state kept.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local Q = require "sandstack.gateway.snapshot_quota"
local guarded = require("sandstack.gateway.worker_result").guarded

local M = {}
local R = core.session_requests

local function docker() return require("sandstack").docker end

local function engine(host, timeout) return require("sandstack").engine { host = host, timeout = timeout } end

-- with_engine(host, timeout, fn) -> fn(eng)'s two values, the engine closed after
local function with_engine(host, timeout, fn)
  local eng, err = engine(host, timeout)
  if not eng then return nil, err end
  local a, b = fn(eng)
  eng:close()
  return a, b
end

-- GET /system/df. Engine 20.10 computes one at a time and refuses a second meanwhile ("a disk
-- usage operation is already running"): that one is waited for, up to a minute.
local function disk_usage(eng)
  for _ = 1, 240 do
    local r = batch.run(eng, R("disk_usage"), 300)[1]
    if r.ok then return type(r.body) == "table" and r.body or {} end
    if not (r.err and r.err.cause == "already_running") then return nil, r.err end
    core.sleep(0.25)
  end
  return E.fail("engine", "busy", "the engine's disk usage stayed busy for a minute: retry the snapshot")
end

-- This node's snapshots by their labels alone (no sizes: cheaper than a df).
local function listed(eng, node)
  local r = batch.run(eng, { R("list_images", nil, { label = Q.NODE .. "=" .. node })[1],
    R("list_volumes", nil, { label = Q.NODE .. "=" .. node })[1] }, 60)
  local err = batch.first_error(r)
  if err then return nil, err end
  return Q.index(r[1].body, type(r[2].body) == "table" and r[2].body.Volumes, node)
end

-- remove(eng, index, ids) -> ids removed | nil, err (err.removed: those that went): each
-- snapshot's image by its id (so an image the engine untagged but did not delete, when a slow
-- removal outlived its request, is found again), then the volume copies of those whose image
-- went. Concurrently, with a bound long enough for an engine busy with its disk: a removal the
-- engine refuses (409: a container runs the image, or a later snapshot is built on it) stays
-- for the sweep's next pass.
local REMOVE_SECONDS = 120
local function remove(eng, index, ids)
  local images, owners = {}, {}
  for _, id in ipairs(ids) do
    for _, image in ipairs(index[id] and index[id].images or {}) do
      images[#images + 1], owners[#owners + 1] = image, id
    end
  end
  local failed_ids, first = {}, nil
  for i, r in ipairs(batch.run(eng, R("remove_image", images), REMOVE_SECONDS)) do
    if not r.ok then
      failed_ids[owners[i]] = true
      first = first or E.new("engine", r.status == 409 and "in_use" or "remove_failed", "snapshot " .. owners[i]
        .. ": its image could not be removed (" .. tostring(r.err and r.err.message) .. ")", { id = owners[i] })
    end
  end
  local volumes, removed = {}, {}
  for _, id in ipairs(ids) do
    if index[id] and not failed_ids[id] then
      for _, v in ipairs(index[id].volumes) do volumes[#volumes + 1] = v end
      removed[#removed + 1] = id
    end
  end
  local verr = batch.first_error(batch.run(eng, R("remove_volume", volumes), REMOVE_SECONDS))
  if verr then removed = {} end
  first = first or verr
  if first then first.removed = removed; return nil, first end
  return removed
end

-- The objects of a snapshot record, as an index entry of its own (by its tag: known before any
-- list answers).
local function own_index(snap)
  local volumes = {}
  for _, v in pairs(snap.volumes or {}) do volumes[#volumes + 1] = v end
  table.sort(volumes)
  return { [snap.id] = { images = { snap.image }, volumes = volumes } }
end

-- take(stack, record, owner, quota, opts) -> snapshot record, bytes | nil, err: stack:snapshot
-- within the owner's tenant's quota. Refused before anything is written when the count is full
-- or the estimate (the sandbox's writable layer, its volumes) does not fit; measured after, and
-- removed again when what the engine reports does not fit (or cannot be read). opts: name, keep.
function M.take(stack, record, owner, quota, opts)
  local eng, err = engine(record.docker_host, record.timeout)
  if not eng then return nil, err end
  local function check(add)
    local df, derr = disk_usage(eng)
    if not df then return nil, derr end
    local index = Q.index(df.Images, df.Volumes, owner.node)
    return index, Q.check(owner.tenant, (Q.usage(index, owner.tenant)), add(df), quota)
  end
  local index, snap
  index, err = check(function(df) return { count = 1, bytes = Q.estimate(df, record) } end)
  if index and not err then
    snap, err = stack:snapshot { name = opts.name, labels = Q.labels(owner, opts.keep) }
    if snap then index, err = check(function() return { count = 0, bytes = 0 } end) end
    if snap and err then remove(eng, own_index(snap), { snap.id }) end
  end
  eng:close()
  if err then return nil, err end
  return snap, index[snap.id] and index[snap.id].bytes or 0
end

-- snapshot(record, owner, quota, opts) -> true, {record =, snapshot = {id, name, created, bytes, keep}}
function M.snapshot(record, owner, quota, opts)
  return guarded(function()
    local stack, err = docker().reconnect(record)
    if not stack then return nil, err end
    local snap, bytes = M.take(stack, record, owner, quota, opts)
    if not snap then stack:close(); return nil, bytes end
    local out = { record = stack:record(), snapshot = { id = snap.id, name = snap.name, created = snap.created,
      bytes = bytes, keep = opts.keep == true } }
    stack:close()
    return out
  end)
end

-- drop_copies(snap, host, timeout): a fork's volume copies once its child has started. The
-- child's start filled its own volumes from them before any of its containers ran, and nothing
-- reads them again; the image stays, since the child's sandbox runs it (the engine refuses to
-- remove it until that container is gone).
function M.drop_copies(snap, host, timeout)
  return with_engine(host, timeout, function(eng)
    local err = batch.first_error(batch.run(eng, R("remove_volume", own_index(snap)[snap.id].volumes), REMOVE_SECONDS))
    if err then return nil, err end
    return true
  end)
end

-- with_index(node, host, timeout, fn) -> fn(eng, index)'s values: this node's snapshots listed
local function with_index(node, host, timeout, fn)
  return with_engine(host, timeout, function(eng)
    local index, err = listed(eng, node)
    if not index then return nil, err end
    return fn(eng, index)
  end)
end

-- remove_snapshot(snap, host, timeout): a fork's snapshot whose child did not start.
function M.remove_snapshot(snap, host, timeout)
  return with_engine(host, timeout, function(eng) return remove(eng, own_index(snap), { snap.id }) end)
end

-- remove_owned(node, owner, host, timeout) -> ids removed | nil, err: the snapshots a session
-- owns and did not keep, once its stack is gone (so a fork's image no container runs any more).
function M.remove_owned(node, owner, host, timeout)
  return with_index(node, host, timeout, function(eng, index) return remove(eng, index, Q.owned(index, owner)) end)
end

-- list(node, tenant, host, timeout) -> true, {used = {count, bytes}, snapshots = { {id, name,
-- session, created, bytes, keep}, ... }}: a tenant's snapshots as its quota counts them.
function M.list(node, tenant, host, timeout)
  return guarded(function()
    local df, err = with_engine(host, timeout, disk_usage)
    if not df then return nil, err end
    local used, entries = Q.usage(Q.index(df.Images, df.Volumes, node), tenant)
    local out = {}
    for i, e in ipairs(entries) do
      out[i] = { id = e.id, name = e.name, session = e.session, created = e.created, bytes = e.bytes, keep = e.keep }
    end
    return { used = used, snapshots = out }
  end)
end

-- delete(node, tenant, id, host, timeout) -> true, {id} | false, not_found (not this tenant's:
-- the same answer as for an id no one holds) or the engine's in_use.
function M.delete(node, tenant, id, host, timeout)
  return guarded(function()
    return with_index(node, host, timeout, function(eng, index)
      local e = index[id]
      if not e or e.tenant ~= tenant then return E.fail("not_found", "no_snapshot", "no such snapshot", { id = id }) end
      local ok, err = remove(eng, index, { id })
      if not ok then return nil, err end
      return { id = id }
    end)
  end)
end

-- sweep(node, alive, since, host, timeout) -> true, {removed = ids, failed = n}: the orphans of
-- this node (gateway/snapshot_quota.lua's orphans: owner gone, not kept). An image a container
-- still runs (a fork's, whose grandchild lives on) is refused by the engine and tried again at
-- the next pass.
function M.sweep(node, alive, since, host, timeout)
  return guarded(function()
    return with_index(node, host, timeout, function(eng, index)
      local ids = Q.orphans(index, alive, since)
      local removed, err = remove(eng, index, ids)
      removed = removed or err.removed
      return { removed = removed, failed = #ids - #removed }
    end)
  end)
end

return M
