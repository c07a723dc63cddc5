-- sandstack.gateway.snapshot_quota: who owns a gateway snapshot, and what it costs its tenant.
-- Pure Lua on the engine's answers, for the worker (gateway/snapshots_worker.lua) and the specs.
-- Every snapshot a gateway session takes (and a fork's, which its child owns) carries, besides
-- the library's io.sandstack.snapshot* labels (docker/snapshot.lua), its owner:
--   io.sandstack.gateway=<node>           the gateway that took it
--   io.sandstack.gateway.tenant=<name>    the tenant it counts against
--   io.sandstack.gateway.session=<key>    the session it goes with
--   io.sandstack.gateway.created=<time>   that session's birth (a key reused later is another owner)
--   io.sandstack.gateway.keep=1|0         1: kept on purpose, it outlives the session
-- Its cost is what the engine reports: the image's own layer (its Size less its parent's: a
-- commit adds one layer) and each volume copy's UsageData.Size (GET /system/df; the engine sums
-- file sizes, so a sparse file counts at its full length).
local E = require "sandstack.error"

local M = {}

M.NODE = "io.sandstack.gateway"
M.TENANT, M.SESSION, M.CREATED, M.KEEP = M.NODE .. ".tenant", M.NODE .. ".session", M.NODE .. ".created", M.NODE .. ".keep"
local SNAP = "io.sandstack.snapshot"

-- labels(owner, keep) -> the owner's labels; owner = {node =, tenant =, key =, created =}.
-- Every one is set, so none is inherited from the image a fork's child runs.
function M.labels(owner, keep)
  return { [M.NODE] = owner.node, [M.TENANT] = owner.tenant, [M.SESSION] = owner.key,
    [M.CREATED] = tostring(math.floor(owner.created or 0)), [M.KEEP] = keep and "1" or "0" }
end

local function list(v) return type(v) == "table" and v or {} end

-- index(images, volumes, node) -> { [id] = {id, name, tenant, session, owner_created, created,
-- keep, image = bool, images = {ids}, volumes = {names}, bytes} }: this node's snapshots in an image list and a
-- volume list (GET /system/df's Images and Volumes, or /images/json and /volumes' Volumes).
function M.index(images, volumes, node)
  local by, ids = {}, {}
  for _, im in ipairs(list(images)) do
    if type(im) == "table" and im.Id then ids[im.Id] = im end
  end
  local function entry(l)
    if type(l) ~= "table" or l[M.NODE] ~= node or type(l[SNAP]) ~= "string" then return nil end
    local id = l[SNAP]
    local e = by[id]
    if not e then
      e = { id = id, name = l[SNAP .. ".name"], tenant = l[M.TENANT], session = l[M.SESSION],
        owner_created = tonumber(l[M.CREATED]), created = tonumber(l["io.sandstack.created"]), keep = l[M.KEEP] == "1",
        image = false, images = {}, volumes = {}, bytes = 0 }
      by[id] = e
    end
    return e
  end
  for _, im in ipairs(list(images)) do
    local e = type(im) == "table" and entry(im.Labels)
    if e then
      local parent = ids[im.ParentId]
      local own = (tonumber(im.Size) or 0) - (parent and tonumber(parent.Size) or 0)
      e.image, e.bytes = true, e.bytes + math.max(own, 0)
      e.images[#e.images + 1] = im.Id
    end
  end
  for _, v in ipairs(list(volumes)) do
    local e = type(v) == "table" and entry(v.Labels)
    if e then
      e.volumes[#e.volumes + 1] = v.Name
      local size = type(v.UsageData) == "table" and tonumber(v.UsageData.Size) -- -1: not reported
      if size and size > 0 then e.bytes = e.bytes + size end
    end
  end
  for _, e in pairs(by) do table.sort(e.volumes) end
  return by
end

-- usage(index, tenant) -> {count =, bytes =}, { entries, oldest first }
function M.usage(index, tenant)
  local out, n, bytes = {}, 0, 0
  for _, e in pairs(index) do
    if e.tenant == tenant then
      n, bytes = n + 1, bytes + e.bytes
      out[#out + 1] = e
    end
  end
  table.sort(out, function(a, b)
    if (a.created or 0) ~= (b.created or 0) then return (a.created or 0) < (b.created or 0) end
    return a.id < b.id
  end)
  return { count = n, bytes = bytes }, out
end

-- estimate(df, record) -> bytes a snapshot of the record's stack will take, before it is taken:
-- the sandbox container's writable layer (SizeRw, what a commit keeps) and the sizes of the
-- volumes the stack declares (what is copied).
function M.estimate(df, record)
  local sandbox
  for _, c in ipairs(list(record.containers)) do
    if c.service == (record.sandbox or "sandbox") then sandbox = "/" .. tostring(c.name) end
  end
  local bytes = 0
  for _, c in ipairs(list(df.Containers)) do
    for _, n in ipairs(list(type(c) == "table" and c.Names)) do
      if n == sandbox then bytes = bytes + math.max(tonumber(c.SizeRw) or 0, 0) end
    end
  end
  local want = {}
  for _, v in ipairs(list(type(record.spec) == "table" and record.spec.volumes)) do
    if type(v) == "table" and v.name then want[tostring(record.project) .. "-" .. v.name] = true end
  end
  for _, v in ipairs(list(df.Volumes)) do
    local size = type(v) == "table" and want[v.Name] and type(v.UsageData) == "table" and tonumber(v.UsageData.Size)
    if size and size > 0 then bytes = bytes + size end
  end
  return bytes
end

local function mib(n) return ("%.1f MiB"):format(n / 1048576) end

-- check(tenant, used, add, quota) -> nil | err (limit/snapshot_count, limit/snapshot_bytes):
-- whether the tenant may hold `used` plus `add` = {count =, bytes =}. quota = {count =, bytes =}.
function M.check(tenant, used, add, quota)
  local free = "delete a snapshot (DELETE /snapshots/<id>) or a session to free room"
  local fields = { tenant = tenant, count = used.count, bytes = used.bytes, quota_count = quota.count,
    quota_bytes = quota.bytes }
  if used.count + add.count > quota.count then
    return E.new("limit", "snapshot_count", ("tenant %s holds %d snapshots (snapshot_quota.count = %d): %s")
      :format(tenant, used.count, quota.count, free), fields)
  end
  if used.bytes + add.bytes > quota.bytes then
    return E.new("limit", "snapshot_bytes", ("tenant %s holds %s of snapshots and this one takes %s "
      .. "(snapshot_quota.bytes = %s): %s"):format(tenant, mib(used.bytes), mib(add.bytes), mib(quota.bytes), free),
      fields)
  end
  return nil
end

-- owner_key(tenant, key, created) -> the string that names one session's life
function M.owner_key(tenant, key, created)
  return tostring(tenant) .. "\0" .. tostring(key) .. "\0" .. tostring(math.floor(tonumber(created) or 0))
end

local function ids_newest_first(entries)
  table.sort(entries, function(a, b) return (a.created or 0) > (b.created or 0) end)
  for i, e in ipairs(entries) do entries[i] = e.id end
  return entries
end

-- owned(index, owner) -> the ids of the owner's snapshots not kept, newest first.
function M.owned(index, owner)
  local want = M.owner_key(owner.tenant, owner.key, owner.created)
  local out = {}
  for _, e in pairs(index) do
    if not e.keep and M.owner_key(e.tenant, e.session, e.owner_created) == want then out[#out + 1] = e end
  end
  return ids_newest_first(out)
end

-- orphans(index, alive, since) -> the ids of snapshots not kept whose owner is not in `alive`
-- (a set of owner_key), newest first. An owner born at `since` - 2 or later may have come after
-- `alive` was read: its snapshots wait for the next pass.
function M.orphans(index, alive, since)
  local out = {}
  for _, e in pairs(index) do
    if not e.keep and not alive[M.owner_key(e.tenant, e.session, e.owner_created)]
      and (e.owner_created or 0) < since - 2 then
      out[#out + 1] = e
    end
  end
  return ids_newest_first(out)
end

return M
