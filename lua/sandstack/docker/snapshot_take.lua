-- The taking of a snapshot (internal to docker/snapshot.lua, whose h:snapshot this is): the
-- sandbox's filesystem committed and loaded again as a clean image, and a copy of each named
-- volume, all made while the stack is paused, for max_pause seconds at most (docker/snapshot.lua
-- says what a snapshot is).
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local L = require "sandstack.docker.lifecycle"
local H = require "sandstack.docker.snapshot_helper"
local inv = require "sandstack.docker.snapshot_inventory"

local M = {}
local R = core.session_requests

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

local SNAPSHOT_KEYS = E.described {
  { "name", "string", type = "string", default = "none",
    refused = "not a string" },
  { "labels", "table", type = "table, `{ [name] = string }`", default = "none",
    refused = "not strings; a name `io.sandstack.snapshot*` or `io.sandstack.project`" },
  { "max_pause", "number", type = "seconds", default = "60",
    refused = "not a number in (0, 86400)" },
}

-- h:snapshot{name =, labels =, max_pause =} -> snapshot record | nil, err. labels: more labels
-- for the image and the volume copies (a caller's owner marks, e.g. the gateway's); never the
-- snapshot's own (io.sandstack.snapshot*) or a project label (a project's removal would take
-- them). max_pause: the seconds the stack may stay paused (M.MAX_PAUSE).
function M.snapshot(self, opts)
  if not self.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
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
  local facts, err = H.sandbox_facts(eng, sandbox)
  if not facts then return nil, err end
  local base; base, err = image_text(eng, facts.image)
  if not base then return nil, err end
  local helper; helper, err = H.image(eng)
  if not helper then return nil, err end
  local now = os.time()
  local labels = { [inv.LABEL] = id, ["io.sandstack.snapshot.name"] = opts.name or id,
    ["io.sandstack.snapshot.source"] = self.project, ["io.sandstack.session"] = self.session_key,
    ["io.sandstack.created"] = tostring(now), ["io.sandstack.version"] = core.VERSION }
  for k, v in pairs(opts.labels or {}) do labels[k] = labels[k] or v end
  local image, raw = inv.REPO .. ":" .. id, inv.REPO .. ":" .. id .. "-raw"
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
    local r = batch.run(eng, R("commit", { sandbox }, { repo = inv.REPO, tag = id .. "-raw", labels = labels,
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

return M
