-- Snapshots, restores, forks and changes of a stack (internal to sandstack.docker; the handle's
-- snapshot, fork and changes, and sandstack.docker.snapshots / remove_snapshot / start's
-- from_snapshot). A snapshot is
--   - the sandbox's filesystem as an image (the engine's commit): sandstack-snapshot:<id>;
--   - a copy of each named volume of the stack: volume <id>-<key>;
--   - the stack's options without any secret, and the egress policy in force (read from the
--     proxy sandstack added).
-- Every object carries io.sandstack.snapshot=<id> (and never io.sandstack.project, so the source
-- stack's destroy leaves it). The stack is paused while the image and the copies are made, so
-- they show one moment. A volume is copied by a short-lived container of the snapshot's own
-- image (`cp -a`, as root, with no network), so the sandbox's image needs a `cp` on its PATH.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local store = require "sandstack.store"
local L = require "sandstack.docker.lifecycle"

local M = {}
local R = core.session_requests

M.LABEL = "io.sandstack.snapshot"
M.REPO = "sandstack-snapshot"

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  return out
end

-- A service's env without the model key's variable (the model puts the session token there and
-- removes any other: csrc/stack/plan.c) and without an entry whose value holds a secret of the
-- options. env: a map, or a list of "NAME=value".
local function env_without(env, secrets)
  if type(env) ~= "table" then return env end
  local function secret_in(v)
    if type(v) ~= "string" then return false end
    for _, sec in ipairs(secrets) do if v:find(sec, 1, true) then return true end end
    return false
  end
  local out = {}
  if env[1] ~= nil then
    for _, e in ipairs(env) do
      local k, v = tostring(e):match("^([^=]*)=?(.*)$")
      if k ~= "ANTHROPIC_API_KEY" and not secret_in(v) then out[#out + 1] = e end
    end
  else
    for k, v in pairs(env) do
      if k ~= "ANTHROPIC_API_KEY" and not secret_in(v) then out[k] = v end
    end
  end
  return out
end

-- The options a snapshot keeps: the start's options without a secret (api_key, session_token,
-- each credential's secret, and any env entry that holds one or names the model key), without
-- the project name (a restore is a new session) and without functions; a compiled policy as
-- its JSON.
function M.spec_of(opts)
  local out = {}
  for k, v in pairs(opts) do
    if type(v) ~= "function" and k ~= "project_name" and k ~= "ttl" and k ~= "idle_timeout" and k ~= "on_expiry"
      and k ~= "from_snapshot" then
      out[k] = v
    end
  end
  local p = out.egress_policy
  if type(p) == "table" and getmetatable(p) and p.render then out.egress_policy = core.json_decode(p:render()) end
  local secrets = {}
  for _, v in ipairs { opts.api_key, opts.session_token } do
    if type(v) == "string" and #v >= 4 then secrets[#secrets + 1] = v end
  end
  for _, c in ipairs(type(opts.credentials) == "table" and opts.credentials or {}) do
    if type(c) == "table" and type(c.secret) == "string" and #c.secret >= 4 then secrets[#secrets + 1] = c.secret end
  end
  if type(out.services) == "table" then
    local svcs = {}
    for i, sv in ipairs(out.services) do
      local c = {}
      for k, v in pairs(type(sv) == "table" and sv or {}) do c[k] = v end
      c.env = env_without(c.env, secrets)
      svcs[i] = c
    end
    out.services = svcs
  end
  out.credentials = store.credentials(out.credentials)
  if out.credentials then
    for _, c in ipairs(out.credentials) do c.placeholder = nil end -- a restore mints its own
  end
  return store.scrub(deep_copy(out))
end

-- The stack's declared volumes: { {key =, name =} } (the inspection CA's is the stack's own and
-- never copied).
local function volumes_of(project, spec)
  local out = {}
  for _, v in ipairs(spec and spec.volumes or {}) do
    out[#out + 1] = { key = v.name, name = project .. "-" .. v.name }
  end
  return out
end

local failed = batch.first_error

-- Copies each volume src -> dst, all at once, each by a container of image that is created,
-- started, waited for and removed. labels mark the helpers. true, or nil, err.
local function copy_volumes(eng, image, pairs_, labels)
  if #pairs_ == 0 then return true end
  local names, creates = {}, {}
  for i, p in ipairs(pairs_) do
    names[i] = "sandstack-copy-" .. core.random_hex(6)
    local body = { Image = image, Entrypoint = { "cp", "-a", "/from/.", "/to/" }, User = "0",
      Labels = labels, NetworkDisabled = true,
      HostConfig = { NetworkMode = "none", Mounts = {
        { Type = "volume", Source = p.src, Target = "/from", ReadOnly = true },
        { Type = "volume", Source = p.dst, Target = "/to" } } } }
    creates[i] = R("create_container", { names[i] }, { body = body })[1]
  end
  local err = failed(batch.run(eng, creates, 60))
  if not err then err = failed(batch.run(eng, R("start", names), 60)) end
  if not err then
    local waited = batch.run(eng, R("wait", names, { timeout = 3600 }), 3600)
    err = failed(waited)
    for i, r in ipairs(waited) do
      local code = type(r.body) == "table" and r.body.StatusCode
      if not err and code ~= 0 then
        err = E.new("engine", "copy_failed", ("copying volume %s failed (cp exit %s): the sandbox's image needs `cp` "
          .. "on its PATH"):format(pairs_[i].src, tostring(code)), { volume = pairs_[i].src })
      end
    end
  end
  batch.run(eng, R("remove_container", names), 60)
  if err then return nil, err end
  return true
end

local function remove_objects(eng, image, volumes)
  if image then batch.run(eng, R("remove_image", { image }), 60) end
  if volumes and #volumes > 0 then batch.run(eng, R("remove_volume", volumes), 60) end
end

local SNAPSHOT_KEYS = { name = true }

-- h:snapshot{name =} -> snapshot record | nil, err
function M.snapshot(self, opts)
  if not self.eng then error("the stack handle is closed", 2) end
  opts = E.check_keys(opts, SNAPSHOT_KEYS, "snapshot")
  if opts.name ~= nil and type(opts.name) ~= "string" then error("snapshot: option 'name' must be a string", 2) end
  local spec = self.spec
  if type(spec) ~= "table" then
    return E.fail("invalid", "no_spec", "snapshot: this handle has no start options (a record from an older "
      .. "sandstack): snapshot a stack started by this version")
  end
  local id = "snap-" .. core.random_hex(6)
  local eng, plan = self.eng, self.plan
  local policy
  if type(plan.proxy) == "table" and plan.proxy.added then -- read before the freeze: exec needs it running
    local p, err = self:egress()
    if not p then return nil, err end
    policy = core.json_decode(p:render())
  end
  local st, err = L.states(self)
  if not st then return nil, err end
  local froze = {}
  for _, n in ipairs(L.names(self)) do
    if st[n] and st[n].running and not st[n].paused then froze[#froze + 1] = n end
  end
  err = failed(L.freeze(eng, froze))
  local now = os.time()
  local labels = { [M.LABEL] = id, ["io.sandstack.snapshot.name"] = opts.name or id,
    ["io.sandstack.snapshot.source"] = self.project, ["io.sandstack.session"] = self.session_key,
    ["io.sandstack.created"] = tostring(now), ["io.sandstack.version"] = core.VERSION }
  local image = M.REPO .. ":" .. id
  local made_image, made_vols = nil, {}
  if not err then
    local sandbox = plan.project .. "-" .. plan.sandbox
    err = failed(batch.run(eng, R("commit", { sandbox }, { repo = M.REPO, tag = id, labels = labels }), 600))
    if not err then made_image = image end
  end
  local vols = {}
  if not err then
    local pairs_ = {}
    for _, v in ipairs(volumes_of(self.project, spec)) do
      local dst = id .. "-" .. v.key
      vols[v.key] = dst
      made_vols[#made_vols + 1] = dst
      pairs_[#pairs_ + 1] = { src = v.name, dst = dst }
    end
    err = failed(batch.run(eng, R("create_volume", made_vols, { labels = labels }), 60))
    if not err then
      local ok; ok, err = copy_volumes(eng, image, pairs_, labels)
      if ok then err = nil end
    end
  end
  local thawed = failed(batch.run(eng, R("unpause", froze), 60))
  err = err or thawed
  if err then
    remove_objects(eng, made_image, made_vols)
    return nil, err
  end
  return { kind = "sandstack.snapshot", version = core.VERSION, id = id, name = opts.name or id, created = now,
    source = self.project, session_key = self.session_key, sandbox = plan.sandbox, image = image, volumes = vols,
    spec = spec, egress_policy = policy, docker_host = plan.docker_host }
end

local function check_snapshot(snap, what)
  if type(snap) ~= "table" or snap.kind ~= "sandstack.snapshot" or type(snap.id) ~= "string"
    or type(snap.spec) ~= "table" then
    error(what .. ": expected a snapshot record from stack:snapshot()", 3)
  end
end

-- The options of a start from snap: its spec under the caller's options (secrets, a new
-- project name, ...), the sandbox's image the snapshot's, the egress policy the one in force
-- at the snapshot unless the caller gives one.
local function restore_opts(snap, opts)
  local o = deep_copy(snap.spec)
  for k, v in pairs(opts) do if k ~= "from_snapshot" then o[k] = v end end
  if opts.services == nil and type(o.services) == "table" then
    for _, s in ipairs(o.services) do
      if s.name == snap.sandbox then s.image = snap.image end
    end
  elseif opts.image == nil and o.image ~= nil then
    o.image = snap.image
  end
  if opts.egress_policy == nil and snap.egress_policy ~= nil then o.egress_policy = snap.egress_policy end
  return o
end

-- sandstack.docker.start(key, {from_snapshot = snap, ...}): a new session from snap. The start
-- makes its volumes as any start does; each is filled from the snapshot's copy as soon as the
-- start reports it made (its volume_created event, before any container starts), so the
-- sandbox's first process finds its files. A copy that fails (or a volume never reported) makes
-- the started stack be removed again and the copy's error returned. start: the plain start
-- (with the expiry options).
function M.start_from(session_key, opts, start)
  local snap = opts.from_snapshot
  check_snapshot(snap, "sandstack.docker.start")
  local o = restore_opts(snap, opts)
  local po = {} -- the plan's options: the expiry's are the start's own (docker/session_methods.lua)
  for k, v in pairs(o) do
    if k ~= "ttl" and k ~= "idle_timeout" and k ~= "on_expiry" then po[k] = v end
  end
  local plan, err = require("sandstack.docker.start").plan(session_key, po)
  if not plan then return nil, err end
  local pending = {}
  for _, v in ipairs(plan.volumes) do
    local src = snap.volumes and snap.volumes[v.key]
    if src then pending[v.name] = src end
  end
  local eng; eng, err = engine { docker_host = o.docker_host, timeout = o.timeout }
  if not eng then return nil, err end
  local user_event, copy_err = o.on_event, nil
  o.on_event = function(ev)
    local src = ev.phase == "volume_created" and pending[ev.volume]
    if src then
      pending[ev.volume] = nil
      if not copy_err then
        local ok, cerr = copy_volumes(eng, snap.image, { { src = src, dst = ev.volume } }, { [M.LABEL .. ".restore"] = snap.id })
        if not ok then copy_err = cerr end
      end
    end
    if user_event then return user_event(ev) end
  end
  local stack; stack, err = start(session_key, o)
  eng:close()
  if not stack then return nil, err end
  local missing = next(pending)
  if copy_err or missing then
    stack:destroy()
    stack:close()
    return nil, copy_err or E.new("engine", "restore_incomplete", "from_snapshot: the start did not report volume "
      .. tostring(missing) .. " made, so it was not filled from the snapshot; the stack was removed again")
  end
  return stack
end

-- h:fork(new_key, opts) -> child, snapshot | nil, err: a snapshot of this stack and a start from
-- it under new_key. The child is a new session (its own token, placeholders, inspection CA and
-- subnet, all minted by its own start); opts give what a snapshot never keeps (api_key,
-- credentials' secrets) and any other option to change. The snapshot stays (the child's
-- sandbox runs its image): remove it with remove_snapshot once the child is destroyed.
function M.fork(self, new_key, opts, start)
  if type(new_key) ~= "string" then error("fork: new_key must be a string", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("fork: options must be a table", 2) end
  local snap, err = M.snapshot(self, { name = "fork of " .. tostring(self.project) })
  if not snap then return nil, err end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.from_snapshot = snap
  local child; child, err = M.start_from(new_key, o, start)
  if not child then
    M.remove({ snap }, { docker_host = self.plan.docker_host })
    return nil, err
  end
  return child, snap
end

local KINDS = { [0] = "changed", [1] = "added", [2] = "deleted" }

-- Lines "md5  ./path" -> { [path] = md5 }
local function sums(text)
  local out = {}
  for sum, path in (text or ""):gmatch("(%x+)  %./([^\r\n]*)") do out[path] = sum end
  return out
end

-- The files of volume a and of volume b with their checksums, by a container of image.
local function volume_sums(eng, image, a, b)
  local name = "sandstack-diff-" .. core.random_hex(6)
  local body = { Image = image, Entrypoint = { "sh", "-c",
    "cd /a && find . -type f -exec md5sum {} +; echo @@; cd /b && find . -type f -exec md5sum {} +" },
    User = "0", Tty = true, NetworkDisabled = true, Labels = { [M.LABEL .. ".diff"] = "1" },
    HostConfig = { NetworkMode = "none", Mounts = { { Type = "volume", Source = a, Target = "/a", ReadOnly = true },
      { Type = "volume", Source = b, Target = "/b", ReadOnly = true } } } }
  local err = failed(batch.run(eng, { R("create_container", { name }, { body = body })[1] }, 60))
  local out
  if not err then err = failed(batch.run(eng, R("start", { name }), 60)) end
  if not err then err = failed(batch.run(eng, R("wait", { name }, { timeout = 600 }), 600)) end
  if not err then
    local r = batch.run(eng, R("logs", { name }), 60)[1]
    if r.ok then out = type(r.body) == "string" and r.body or "" else err = r.err end
  end
  batch.run(eng, R("remove_container", { name }), 60)
  if err then return nil, err end
  local left, right = out:match("^(.-)@@(.*)$")
  return sums(left), sums(right)
end

local CHANGES_KEYS = { since = true }

-- h:changes{since = snap} -> { sandbox = { {path =, kind = "added"|"changed"|"deleted"}, ... },
-- workspace = { [volume key] = { same form } } }: sandbox is the sandbox's filesystem since its
-- container was made (the engine's diff; volumes are not in it), workspace (with since only)
-- each declared volume against the snapshot's copy, compared by checksum.
function M.changes(self, opts)
  if not self.eng then error("the stack handle is closed", 2) end
  opts = E.check_keys(opts, CHANGES_KEYS, "changes")
  if opts.since ~= nil then check_snapshot(opts.since, "changes") end
  local sandbox = self.plan.project .. "-" .. self.plan.sandbox
  local r = batch.run(self.eng, R("changes", { sandbox }), 60)[1]
  if not r.ok then return nil, r.err end
  local out = { sandbox = {} }
  for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
    out.sandbox[#out.sandbox + 1] = { path = c.Path, kind = KINDS[c.Kind] or tostring(c.Kind) }
  end
  if opts.since then
    local image = self.spec and opts.since.image
    out.workspace = {}
    for key, src in pairs(opts.since.volumes or {}) do
      local before, after = volume_sums(self.eng, image, src, self.project .. "-" .. key)
      if not before then return nil, after end
      local list = {}
      for p, s in pairs(after) do
        if not before[p] then list[#list + 1] = { path = p, kind = "added" }
        elseif before[p] ~= s then list[#list + 1] = { path = p, kind = "changed" } end
      end
      for p in pairs(before) do if not after[p] then list[#list + 1] = { path = p, kind = "deleted" } end end
      table.sort(list, function(x, y) return x.path < y.path end)
      out.workspace[key] = list
    end
  end
  return out
end

local LIST_KEYS = { docker_host = true, timeout = true, source = true }

-- sandstack.docker.snapshots{source = project} -> { {id =, name =, source =, created =, image =,
-- volumes = {name, ...}}, ... } sorted by creation, from the labels of images and volumes.
function M.list(opts)
  opts = E.check_keys(opts, LIST_KEYS, "sandstack.docker.snapshots")
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local r = batch.run(eng, { R("list_images", nil, { label = M.LABEL })[1], R("list_volumes", nil, { label = M.LABEL })[1] }, 60)
  eng:close()
  err = failed(r)
  if err then return nil, err end
  local by = {}
  local function entry(l)
    local id = type(l) == "table" and l[M.LABEL]
    if type(id) ~= "string" then return nil end
    local src = l["io.sandstack.snapshot.source"]
    if opts.source and src ~= opts.source then return nil end
    by[id] = by[id] or { id = id, name = l["io.sandstack.snapshot.name"], source = src,
      session_key = l["io.sandstack.session"], created = tonumber(l["io.sandstack.created"]), volumes = {} }
    return by[id]
  end
  for _, img in ipairs(type(r[1].body) == "table" and r[1].body or {}) do
    local e = entry(img.Labels)
    if e then e.image = M.REPO .. ":" .. e.id end
  end
  local vb = type(r[2].body) == "table" and r[2].body.Volumes or {}
  for _, v in ipairs(type(vb) == "table" and vb or {}) do
    local e = entry(v.Labels)
    if e then e.volumes[#e.volumes + 1] = v.Name end
  end
  local out = {}
  for _, e in pairs(by) do table.sort(e.volumes); out[#out + 1] = e end
  table.sort(out, function(a, b)
    if (a.created or 0) ~= (b.created or 0) then return (a.created or 0) < (b.created or 0) end
    return a.id < b.id
  end)
  return out
end

local REMOVE_KEYS = { docker_host = true, timeout = true }

-- sandstack.docker.remove_snapshot(s): s a snapshot record, an entry of snapshots(), an id, or
-- a list of them. Removes the image and the volume copies; a snapshot whose image a stack still
-- runs (a fork's sandbox) is refused by the engine (409), named in the error. Returns the ids
-- removed, or nil, err (what was removed before stays removed).
function M.remove(s, opts)
  opts = E.check_keys(opts, REMOVE_KEYS, "sandstack.docker.remove_snapshot")
  local list = (type(s) == "table" and s.id == nil) and s or { s }
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local all; all, err = M.list(opts)
  if not all then eng:close(); return nil, err end
  local known = {}
  for _, e in ipairs(all) do known[e.id] = e end
  local removed, first = {}, nil
  for _, x in ipairs(list) do
    local id = type(x) == "table" and x.id or x
    if type(id) ~= "string" then eng:close(); error("remove_snapshot: expected a snapshot, its id or a list of them", 2) end
    local e = known[id]
    if e then
      local r = batch.run(eng, R("remove_image", { M.REPO .. ":" .. id }), 60)[1]
      if not r.ok then
        first = first or E.new("engine", r.status == 409 and "in_use" or nil, "snapshot " .. id .. ": its image could not "
          .. "be removed (" .. tostring(r.err and r.err.message) .. "): destroy the stacks started from it first",
          { snapshot = id, status = r.status })
      else
        local vr = batch.run(eng, R("remove_volume", e.volumes), 60)
        local verr = failed(vr)
        if verr then first = first or verr else removed[#removed + 1] = id end
      end
    end
  end
  eng:close()
  if first then first.removed = removed; return nil, first end
  return removed
end

return M
