-- Snapshots, restores, forks and changes of a stack (internal to sandstack.docker; the handle's
-- snapshot, fork and changes, and sandstack.docker.snapshots / remove_snapshot / start's
-- from_snapshot). A snapshot is
--   - the sandbox's filesystem as an image: sandstack-snapshot:<id>, the engine's commit of the
--     sandbox loaded again under a config of the sandbox image's own (its environment, command,
--     user) and the snapshot's labels alone, so no token, key, placeholder or project label of
--     the sandbox container's reaches it (csrc/stack/snapshot_image.c says why a commit cannot);
--   - a copy of each named volume of the stack: volume <id>-<volume key>;
--   - the stack's options without any secret, and the egress policy in force (read from the
--     proxy sandstack added).
-- Every object carries io.sandstack.snapshot=<id> (and never io.sandstack.project, so the source
-- stack's destroy leaves it). The stack is paused while the image and the copies are made, so
-- they show one moment, for max_pause seconds at most: past it the snapshot fails, what it made
-- is removed and the stack runs again. Volumes are copied and compared by sandstack-tree in a
-- confined helper of sandstack's own image (docker/snapshot_helper.lua): nothing of the guest's
-- image runs outside the sandbox.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local store = require "sandstack.store"
local L = require "sandstack.docker.lifecycle"
local H = require "sandstack.docker.snapshot_helper"

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

M.MAX_PAUSE = 60 -- seconds a snapshot may keep the stack paused: max_pause's default
M.COPY_SECONDS = 600 -- a restore's copies and changes' comparisons (nothing is paused for them)
M.LATE_COMMIT_SECONDS = 120 -- how long a commit cut off by max_pause is waited for, to be removed

local function remove_objects(eng, images, volumes)
  if #images > 0 then batch.run(eng, R("remove_image", images), 60) end
  if volumes and #volumes > 0 then batch.run(eng, R("remove_volume", volumes), 60) end
end

-- An image's inspect answer as the engine's JSON text (its config goes back as it was); or nil, err.
local function image_text(eng, name)
  local q = R("inspect_image", { name })[1]
  q.raw = true
  local r = batch.run(eng, { q }, 60)[1]
  if r.ok and r.status ~= 404 then return r.body end
  return nil, r.err or E.new("engine", "not_found", "snapshot: image " .. name .. " is gone", { image = name })
end

-- The sandbox container's image (its id) and runtime, which its helpers run under (the engine's
-- answer, not the plan: a handle made from a record keeps no runtime); or nil, err.
local function sandbox_facts(eng, sandbox)
  local r = batch.run(eng, R("inspect", { sandbox }), 60)[1]
  if not r.ok then return nil, r.err end
  local info = type(r.body) == "table" and r.body or {}
  if type(info.Image) ~= "string" then
    return E.fail("engine", "bad_answer", "snapshot: the sandbox's inspect names no image")
  end
  local rt = type(info.HostConfig) == "table" and info.HostConfig.Runtime
  return { image = info.Image, runtime = type(rt) == "string" and rt ~= "" and rt or nil }
end

-- A commit the engine was still writing when its snapshot's deadline came lands later, with the
-- sandbox container's config in it: waited for (the stack runs meanwhile) and removed. true
-- when it is gone.
local function remove_late_commit(eng, raw)
  local stop = core.engine_clock() + M.LATE_COMMIT_SECONDS
  repeat
    local r = batch.run(eng, R("inspect_image", { raw }), 30)[1]
    if r.ok and r.status ~= 404 then
      return batch.first_error(batch.run(eng, R("remove_image", { raw }), 60)) == nil
    end
    core.sleep(0.5)
  until core.engine_clock() > stop
  return false
end

-- The snapshot's image from the commit raw: its layers under the base's config and labels.
local function clean_image(eng, raw, base, labels, image)
  local committed, err = image_text(eng, raw)
  if not committed then return nil, err end
  local archive; archive, err = core.snapshot_image_archive(committed, base, labels, image)
  if not archive then return nil, err end
  return H.load(eng, archive, image)
end

local SNAPSHOT_KEYS = { name = "string", labels = "table", max_pause = "number" }

-- h:snapshot{name =, labels =, max_pause =} -> snapshot record | nil, err. labels: more labels
-- for the image and the volume copies (a caller's owner marks, e.g. the gateway's); never the
-- snapshot's own (io.sandstack.snapshot*) or a project label (a project's removal would take
-- them). max_pause: the seconds the stack may stay paused (M.MAX_PAUSE).
function M.snapshot(self, opts)
  if not self.eng then E.raise("the stack handle is closed") end
  local oerr
  opts, oerr = E.options(opts, SNAPSHOT_KEYS, "snapshot")
  if not opts then return nil, oerr end
  for k, v in pairs(opts.labels or {}) do
    if type(k) ~= "string" or type(v) ~= "string" then E.raise("snapshot: option 'labels' must map names to strings") end
    if k:find("^io%.sandstack%.snapshot") or k == "io.sandstack.project" then
      return E.refuse("snapshot", "labels", "may not set " .. k .. ": io.sandstack.snapshot* and io.sandstack.project are sandstack's")
    end
  end
  local max_pause = opts.max_pause or M.MAX_PAUSE
  if not (max_pause > 0 and max_pause < 86400) then
    return E.refuse("snapshot", "max_pause", "must be a number of seconds above 0 and below 86400")
  end
  local spec = self.spec
  if type(spec) ~= "table" then
    return E.fail("invalid", "no_spec", "snapshot: this handle has no start options (a record from an older "
      .. "sandstack): snapshot a stack started by this version")
  end
  local eng, plan = self.eng, self.plan
  local ferr
  spec, ferr = require("sandstack.docker.record_env").fill(eng, plan, spec) -- env values, from the containers
  if not spec then return nil, ferr end
  local id = "snap-" .. core.random_hex(6)
  local sandbox = plan.project .. "-" .. plan.sandbox
  -- read before the freeze: the policy (exec needs the proxy running), the sandbox image's own
  -- config, the helper's image; and the volumes made
  local policy
  if type(plan.proxy) == "table" and plan.proxy.added then
    local p, err = self:egress()
    if not p then return nil, err end
    policy = core.json_decode(p:render())
  end
  local facts, err = sandbox_facts(eng, sandbox)
  if not facts then return nil, err end
  local base; base, err = image_text(eng, facts.image)
  if not base then return nil, err end
  local helper; helper, err = H.image(eng)
  if not helper then return nil, err end
  local now = os.time()
  local labels = { [M.LABEL] = id, ["io.sandstack.snapshot.name"] = opts.name or id,
    ["io.sandstack.snapshot.source"] = self.project, ["io.sandstack.session"] = self.session_key,
    ["io.sandstack.created"] = tostring(now), ["io.sandstack.version"] = core.VERSION }
  for k, v in pairs(opts.labels or {}) do labels[k] = labels[k] or v end
  local image, raw = M.REPO .. ":" .. id, M.REPO .. ":" .. id .. "-raw"
  local vols, made_vols, jobs = {}, {}, {}
  for _, v in ipairs(volumes_of(self.project, spec)) do
    local dst = id .. "-" .. v.key
    vols[v.key] = dst
    made_vols[#made_vols + 1] = dst
    jobs[#jobs + 1] = { mode = "copy", from = v.name, to = dst }
  end
  err = failed(batch.run(eng, R("create_volume", made_vols, { labels = labels }), 60))
  if err then remove_objects(eng, {}, made_vols); return nil, err end
  -- the helpers are made before the freeze, on their own time: a create cut by the deadline
  -- would still make its helper after the rollback (snapshot_helper.lua)
  local helpers; helpers, err = H.create(eng, jobs, { image = helper, runtime = facts.runtime, project = self.project })
  if not helpers then remove_objects(eng, {}, made_vols); return nil, err end
  local st; st, err = L.states(self)
  if not st then H.remove(eng, helpers); remove_objects(eng, {}, made_vols); return nil, err end
  local froze = {}
  for _, n in ipairs(L.names(self)) do
    if st[n] and st[n].running and not st[n].paused then froze[#froze + 1] = n end
  end
  err = failed(L.freeze(eng, froze))
  local deadline = core.engine_clock() + max_pause
  local bound = { deadline = deadline, seconds = max_pause, what = "snapshot",
    advice = ", and the stack runs again: give max_pause more time" }
  local late
  if not err then
    local left = deadline - core.engine_clock()
    local r = batch.run(eng, R("commit", { sandbox }, { repo = M.REPO, tag = id .. "-raw", labels = labels,
      timeout = left }), left)[1]
    late = not r.ok and core.engine_clock() >= deadline - 0.05
    if not r.ok then err = late and H.deadline_error(bound, "commit") or r.err end
  end
  if not err then
    local ok; ok, err = H.start(eng, helpers, bound)
    if ok then err = nil end
  else
    H.remove(eng, helpers)
  end
  local thawed = failed(batch.run(eng, R("unpause", froze), 60)) -- whatever failed before
  err = err or thawed
  if not err then
    local ok; ok, err = clean_image(eng, raw, base, labels, image)
    if ok then err = nil end
  end
  -- the commit, which holds the sandbox container's own config
  remove_objects(eng, { raw })
  if late then err.commit_removed = remove_late_commit(eng, raw) end
  if err then
    remove_objects(eng, { image }, made_vols)
    return nil, err
  end
  return { kind = "sandstack.snapshot", version = core.VERSION, id = id, name = opts.name or id, created = now,
    source = self.project, session_key = self.session_key, sandbox = plan.sandbox, image = image, volumes = vols,
    spec = spec, egress_policy = policy, docker_host = plan.docker_host }
end

-- snap as an option `name` of what: a non-table raises at the caller; a table that is not a
-- snapshot record is nil, err (invalid/not_a_snapshot).
local function check_snapshot(snap, what, name)
  E.want(snap, "table", what, name, "a snapshot record from stack:snapshot()")
  if type(snap) ~= "table" or snap.kind ~= "sandstack.snapshot" or type(snap.id) ~= "string"
    or type(snap.spec) ~= "table" then
    return E.fail("invalid", "not_a_snapshot", what .. ": option '" .. name .. "' is not a snapshot record from "
      .. "stack:snapshot() (an entry of sandstack.docker.snapshots() is not one)", { option = name })
  end
  return true
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
  local ok, cerr = check_snapshot(snap, "sandstack.docker.start", "from_snapshot")
  if not ok then return nil, cerr end
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
  local helper
  if next(pending) then
    helper, err = H.image(eng)
    if not helper then eng:close(); return nil, err end
  end
  local user_event, copy_err = o.on_event, nil
  o.on_event = function(ev)
    local src = ev.phase == "volume_created" and pending[ev.volume]
    if src then
      pending[ev.volume] = nil
      if not copy_err then
        local ok, cerr = H.run(eng, { { mode = "copy", from = src, to = ev.volume } }, { image = helper,
          runtime = plan.runtime, project = plan.project, deadline = core.engine_clock() + M.COPY_SECONDS,
          seconds = M.COPY_SECONDS, what = "from_snapshot" })
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
  E.want(new_key, "string", "fork", "argument 'new_key'")
  if new_key == nil then E.raise("fork: argument 'new_key' must be a string, got nil") end
  E.want(opts, "table", "fork", "argument 'opts'", "an options table")
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

local CHANGES_KEYS = { since = true }

-- h:changes{since = snap} -> { sandbox = { {path =, kind = "added"|"changed"|"deleted"}, ... },
-- workspace = { [volume key] = { same form } } }: sandbox is the sandbox's filesystem since its
-- container was made (the engine's diff; volumes are not in it), workspace (with since only)
-- each declared volume against the snapshot's copy: its regular files, compared byte for byte by
-- sandstack-tree in a confined helper (docker/snapshot_helper.lua), never by the guest's tools.
function M.changes(self, opts)
  if not self.eng then E.raise("the stack handle is closed") end
  opts = E.check_keys(opts, CHANGES_KEYS, "changes")
  if opts.since ~= nil then
    local ok, err = check_snapshot(opts.since, "changes", "since")
    if not ok then return nil, err end
  end
  local sandbox = self.plan.project .. "-" .. self.plan.sandbox
  local r = batch.run(self.eng, R("changes", { sandbox }), 60)[1]
  if not r.ok then return nil, r.err end
  local out = { sandbox = {} }
  for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
    out.sandbox[#out.sandbox + 1] = { path = c.Path, kind = KINDS[c.Kind] or tostring(c.Kind) }
  end
  if opts.since then
    local facts, err = sandbox_facts(self.eng, sandbox)
    if not facts then return nil, err end
    local helper; helper, err = H.image(self.eng)
    if not helper then return nil, err end
    local jobs = {}
    for key, src in pairs(opts.since.volumes or {}) do
      jobs[#jobs + 1] = { mode = "diff", old = src, new = self.project .. "-" .. key, key = key }
    end
    local answers; answers, err = H.run(self.eng, jobs, { image = helper, runtime = facts.runtime,
      project = self.project, deadline = core.engine_clock() + M.COPY_SECONDS, seconds = M.COPY_SECONDS,
      what = "changes" })
    if not answers then return nil, err end
    out.workspace = {}
    for i, job in ipairs(jobs) do
      local list; list, err = H.parse_diff(answers[i], job.new)
      if not list then return nil, err end
      out.workspace[job.key] = list
    end
  end
  return out
end

local LIST_KEYS = { docker_host = "string", timeout = E.SECONDS, source = "string" }

-- sandstack.docker.snapshots{source = project} -> { {id =, name =, source =, created =, image =,
-- volumes = {name, ...}}, ... } sorted by creation, from the labels of images and volumes.
function M.list(opts)
  local err
  opts, err = E.options(opts, LIST_KEYS, "sandstack.docker.snapshots")
  if not opts then return nil, err end
  local eng; eng, err = engine(opts)
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

local REMOVE_KEYS = { docker_host = "string", timeout = E.SECONDS }

-- sandstack.docker.remove_snapshot(s): s a snapshot record, an entry of snapshots(), an id, or
-- a list of them. Removes the image and the volume copies; a snapshot whose image a stack still
-- runs (a fork's sandbox) is refused by the engine (409), named in the error. Returns the ids
-- removed, or nil, err (what was removed before stays removed).
function M.remove(s, opts)
  local err
  opts, err = E.options(opts, REMOVE_KEYS, "sandstack.docker.remove_snapshot")
  if not opts then return nil, err end
  E.want(s, "table|string", "sandstack.docker.remove_snapshot", "argument 's'", "a snapshot, its id or a list of them")
  local list = (type(s) == "table" and s.id == nil) and s or { s }
  for _, x in ipairs(list) do
    local id = type(x) == "table" and x.id or x
    E.want(id, "string", "sandstack.docker.remove_snapshot", "argument 's'", "a snapshot, its id or a list of them")
  end
  local eng; eng, err = engine(opts)
  if not eng then return nil, err end
  local all; all, err = M.list(opts)
  if not all then eng:close(); return nil, err end
  local known = {}
  for _, e in ipairs(all) do known[e.id] = e end
  local removed, first = {}, nil
  for _, x in ipairs(list) do
    local id = type(x) == "table" and x.id or x
    local e = known[id]
    if e then
      -- the image, and a commit that landed after its snapshot's deadline (see M.snapshot)
      local r = batch.run(eng, R("remove_image", { M.REPO .. ":" .. id, M.REPO .. ":" .. id .. "-raw" }), 60)[1]
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
