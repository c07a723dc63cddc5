-- What sandstack owns on an engine, read from labels: list, reap, down, and the marks of warm
-- pools (internal to sandstack.docker; the public functions are re-exported there).
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"

local M = {}

local LABEL = "io.sandstack.project"

local function engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local function list_reqs(project)
  return batch.list_requests(project and (LABEL .. "=" .. project) or LABEL)
end

-- A JSON array as core.json_decode hands it over: a table whose keys are exactly 1..n. A JSON
-- object with any member is not one. (An empty object decodes like an empty array, so `{}`
-- reads as an empty list: after decoding the two cannot be told apart.)
function M.is_array(v)
  if type(v) ~= "table" then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  for i = 1, n do
    if v[i] == nil then return false end
  end
  return true
end

local function bad_answer(what)
  return E.new("engine", "bad_answer", "the engine's " .. what .. " is malformed (not a JSON array):"
    .. " nothing was taken as listed")
end
M.bad_answer = bad_answer

-- The three label lists (/containers/json, /networks, /volumes) checked for their shape: an
-- answer of the wrong shape is an error, never an empty list (reap and down would see nothing
-- to do). Returns { containers =, networks =, volumes = } or nil, err (engine/bad_answer).
function M.checked_lists(cs, ns, vb)
  if not M.is_array(cs) then return nil, bad_answer("container list") end
  if not M.is_array(ns) then return nil, bad_answer("network list") end
  -- /volumes answers an object { Volumes = [...] | null, Warnings = ... }
  if type(vb) ~= "table" or (next(vb) ~= nil and M.is_array(vb))
    or (vb.Volumes ~= nil and not M.is_array(vb.Volumes)) then
    return nil, bad_answer("volume list")
  end
  return { containers = cs, networks = ns, volumes = vb.Volumes or {} }
end

local function listed(results)
  local err = batch.first_error(results)
  if err then return nil, err end
  return M.checked_lists(results[1].body, results[2].body, results[3].body)
end

-- Removes every object labelled with the project: containers, then networks, then volumes.
-- Objects the handle knows are deleted while the label lists are being read, with the plan's
-- own removals (the deletes go first in the batch, so the engine starts on them first);
-- whatever the lists add (objects this handle did not create: the record, expiry marks, a
-- pool's marks, another process's) joins the round of its kind, so a teardown costs three
-- rounds after the lists. known: a plan's removals {containers =, networks =, volumes =,
-- lists =}, or nil.
local KINDS = { container = "containers", network = "networks", volume = "volumes" }
function M.remove_project(eng, project, known)
  known = known or { containers = {}, networks = {}, volumes = {}, lists = list_reqs(project) }
  local reqs, names = {}, { container = {}, network = {}, volume = {} }
  for i, q in ipairs(known.containers) do reqs[i] = q end
  for kind, key in pairs(KINDS) do
    for _, q in ipairs(known[key] or {}) do names[kind][q.name] = true end
  end
  local k = #reqs
  for _, q in ipairs(known.lists) do reqs[#reqs + 1] = q end
  local r = batch.run(eng, reqs, 60)
  local objs, err = listed({ r[k + 1], r[k + 2], r[k + 3] })
  if not objs then return nil, err end
  local deleted = {}
  for i = 1, k do deleted[i] = r[i] end
  local first = batch.first_error(deleted)
  local extra = { containers = {}, networks = {}, volumes = {} }
  local function add(kind, name, id)
    if not names[kind][name] then extra[KINDS[kind]][#extra[KINDS[kind]] + 1] = id or name end
  end
  for _, c in ipairs(objs.containers) do add("container", (c.Names and c.Names[1] or ""):gsub("^/", ""), c.Id) end
  for _, n in ipairs(objs.networks) do add("network", n.Name) end
  for _, v in ipairs(objs.volumes) do add("volume", v.Name) end
  -- a removal is made only from names the engine listed; the known containers are gone already
  local more = core.stack_removals(extra)
  local rounds = {}
  for _, key in ipairs { "networks", "volumes" } do
    rounds[key] = {}
    for _, q in ipairs(known[key] or {}) do rounds[key][#rounds[key] + 1] = q end
    for _, q in ipairs(more[key]) do rounds[key][#rounds[key] + 1] = q end
  end
  local ok, rerr = batch.remove_requests(eng, more.containers, rounds.networks, rounds.volumes)
  first = first or (not ok and rerr) or nil
  local a = core.engine_address(eng.host)
  if not first and a and a.unix_path then -- the proxy's control directory (docker/control.lua)
    local _, derr = require("sandstack.docker.control").remove(project)
    first = derr
  end
  if first then return nil, first end
  return true
end

-- The claim of a pooled stack: a container named <project>-claim, created and never started.
-- The engine's name registry answers a second create of that name 409, in any process, so
-- exactly one claimant wins. It carries the project label, so the stack's removal takes it.
-- The same create with role "ready" is the mark a filler sets once the stack has passed
-- readiness: only marked stacks are handed out (a half-made one never is).
function M.mark(eng, role, project, pool, session_key, image)
  local body = { Image = image, Entrypoint = { "true" }, NetworkDisabled = true,
    Labels = { [LABEL] = project, ["io.sandstack.pool"] = pool, ["io.sandstack.session"] = session_key,
      ["io.sandstack.role"] = role, ["io.sandstack.version"] = core.VERSION },
    HostConfig = { NetworkMode = "none" } }
  local r = batch.run(eng, { ops.request("create_container", project .. "-" .. role, { body = body }) }, 60)[1]
  if r.ok then return true end
  return nil, r.err
end

-- The claim of an idle pooled stack by acquire: its ready mark renamed from
-- <project>-ready to <project>-claim, the one name every claimant asks for. The engine takes the
-- container's lock, refuses a rename to the name a container already holds (400) and a name
-- another container holds (409), and a second claimant that looks the mark up after the first
-- rename finds no <project>-ready (404): exactly one rename succeeds. The target must be the
-- same for every claimant: two renames of one container to two different names both succeed
-- (the second finds the container already renamed and renames it again). Returns true, or nil
-- and the engine's error; err.lost is set when another claimant won.
local LOST = { [400] = true, [404] = true, [409] = true }
function M.claim_request(project)
  return ops.request("rename_container", project .. "-ready", { name = project .. "-claim" })
end
function M.claim_lost(r) return LOST[r.status] == true end

-- The session of a stack claimed by rename: a volume <project>-claim carrying the session label
-- (a container's labels cannot change), written by the winner right after its claim, and the
-- session's record (record: stack:record() as JSON), which sandstack.docker.open reads as it reads
-- a started stack's. Its project label makes the stack's removal take it. ~1 ms on 20.10
-- (bench/pool_bench.lua).
function M.claim_record_request(project, pool, session_key, record)
  local method, path = ops.target("create_volume", project .. "-claim")
  return { method, path, { Name = project .. "-claim", Labels = { [LABEL] = project,
    ["io.sandstack.pool"] = pool, ["io.sandstack.session"] = session_key, ["io.sandstack.role"] = "claim",
    ["io.sandstack.version"] = core.VERSION, ["io.sandstack.record"] = record } } }
end

-- A pool mark's role from a container list entry: "claim" (a claim container, or a ready mark
-- renamed to <project>-claim), "ready" (a mark not claimed), or nil (not a mark).
function M.mark_role(c)
  local l = type(c) == "table" and type(c.Labels) == "table" and c.Labels or {}
  local role, project = l["io.sandstack.role"], l[LABEL]
  if role == "ready" and type(c.Names) == "table" and c.Names[1] == "/" .. tostring(project) .. "-claim" then
    return "claim"
  end
  if role == "ready" or role == "claim" then return role end
end

local POOL = "io.sandstack.pool"

-- A stack of a warm pool that no session holds and whose filler has not marked it ready is
-- "starting" for this long after its creation, then "failed" (its filler died mid-start).
M.POOL_STARTING_GRACE = 600

-- The state of a pooled stack from its list entry: in_use (claimed), ready (marked, every
-- service running), starting (unmarked, young) or failed.
function M.pool_state(e, now, grace)
  if e.claimed then return "in_use" end
  if e.marked then
    for _, st in pairs(e.services) do if st ~= "running" then return "failed" end end
    return next(e.services) and "ready" or "failed"
  end
  if e.created and (now or os.time()) - e.created < (grace or M.POOL_STARTING_GRACE) then return "starting" end
  return "failed"
end

-- Stacks owned by sandstack on the engine, from labels: { {project=, session_key=, created=,
-- pool=, state=, ...} }, sorted by pool and project. Objects without the project label are not
-- sandstack's and are skipped; an Engine answer of the wrong shape is an error.
local LIST_KEYS = E.described {
  { "docker_host", "string", type = "string", default = "the default",
    refused = "not a string" },
  { "timeout", E.SECONDS, type = "seconds", default = "30",
    refused = "not above 0" },
  { "project", "string", type = "string", default = "every project",
    refused = "not a string" },
  { "pool", "string", type = "string", default = "every stack",
    refused = "not a string: only that warm pool's stacks" },
}
M.LIST_KEYS = LIST_KEYS -- sandstack.swarm's list takes these too (but pool: no warm pools there)
function M.list(opts)
  local err
  opts, err = E.options(opts, LIST_KEYS, "sandstack.docker.list")
  if not opts then return nil, err end
  local eng; eng, err = engine(opts)
  if not eng then return nil, err end
  local project = opts.project and (LABEL .. "=" .. opts.project) or LABEL
  local r = batch.run(eng, opts.pool and core.stack_list_requests(project, POOL .. "=" .. opts.pool)
    or core.stack_list_requests(project), 60)
  eng:close()
  err = batch.first_error(r)
  if err then return nil, err end
  local lists; lists, err = M.checked_lists(r[1].body, r[2].body, r[3].body)
  if not lists then return nil, err end
  local cs, ns = lists.containers, lists.networks
  local by = {}
  local function entry(labels)
    local p = type(labels) == "table" and labels[LABEL]
    if type(p) ~= "string" then return nil end
    by[p] = by[p] or { project = p, session_key = labels["io.sandstack.session"], pool = labels[POOL],
      version = labels["io.sandstack.version"], services = {}, images = {}, networks = 0, volumes = 0 }
    -- the stack's objects carry its birth; a pool's marks, its claim and a gateway's marker do not
    by[p].created = by[p].created or tonumber(labels["io.sandstack.created"])
    return by[p]
  end
  for _, c in ipairs(cs) do
    local labels = type(c) == "table" and c.Labels
    local e = entry(labels)
    if e then
      local role = M.mark_role(c)
      if role == "claim" then
        e.claimed, e.pool = true, e.pool or labels[POOL]
        -- a claim container names its session; a renamed ready mark's session is in its record
        if labels["io.sandstack.role"] == "claim" then e.claim_session = labels["io.sandstack.session"] end
      elseif role == "ready" then
        e.marked = true
      elseif labels["io.sandstack.role"] ~= "init" and labels["io.sandstack.role"] ~= "gateway" then
        -- the init volume's holder and a gateway's marker are no services
        local svc = labels["io.sandstack.service"] or "?"
        e.services[svc], e.images[svc] = c.State, c.Image
      end
    end
  end
  for _, n in ipairs(ns) do local e = entry(type(n) == "table" and n.Labels); if e then e.networks = e.networks + 1 end end
  for _, v in ipairs(lists.volumes) do
    local labels = type(v) == "table" and v.Labels
    local e = entry(labels)
    if e then
      e.volumes = e.volumes + 1
      if labels["io.sandstack.role"] == "claim" then e.claim_session = e.claim_session or labels["io.sandstack.session"] end
    end
  end
  local out, now = {}, os.time()
  for _, e in pairs(by) do
    if e.pool then
      -- the objects' own session label is the pool's placeholder: the claim names the owner
      e.state = M.pool_state(e, now)
      -- marked idle by the engine, but handed to a session on this host (its rename in flight, or
      -- its claimant died before it): in use, never offered or reaped as idle
      if e.state ~= "in_use" and e.marked and require("sandstack.docker.pool_store").claimed_here(e.project) then
        e.state = "in_use"
      end
      e.session_key = e.claim_session
    end
    e.claim_session = nil
    out[#out + 1] = e
  end
  table.sort(out, function(a, b)
    if (a.pool or "") ~= (b.pool or "") then return (a.pool or "") < (b.pool or "") end
    return a.project < b.project
  end)
  return out
end

-- Removes owned stacks: those older than older_than seconds, or one project, or those whose
-- project name starts with prefix, or (pool = name) a warm pool's leftovers: every stack of
-- that pool no session holds, idle, starting or half-made; or (all = true) every one. No filter
-- is refused, as the CLI's reap without --all is: a filter left out by mistake must not widen
-- into "every stack on the engine". An idle stack is claimed before it is removed, so a
-- concurrent acquire never receives a stack being removed. Returns the list of removed projects.
local REAP_KEYS = E.described {
  { "docker_host", "string", type = "string", default = "the default",
    refused = "not a string" },
  { "timeout", E.SECONDS, type = "seconds", default = "30",
    refused = "not above 0" },
  { "project", "string", type = "string", default = "any",
    refused = "not a string" },
  { "prefix", "string", type = "string", default = "any",
    refused = "not a string: projects starting with it" },
  -- a filter that cannot be read must never widen into "every stack"
  { "older_than", E.SECONDS0, type = "seconds", default = "any age",
    refused = "not a number: created at least that long ago" },
  { "pool", "string", type = "string", default = "none",
    refused = "not a string: that pool's stacks no session holds" },
  { "idle_only", "boolean", type = "boolean", default = "`false`",
    refused = "with `pool`: only its ready (and failed marked) stacks" },
  { "all", "boolean", type = "boolean", default = "`false`",
    refused = "not a boolean: every owned stack; no filter at all is refused, `invalid`/`filter_required`" },
}
M.REAP_KEYS = REAP_KEYS -- sandstack.swarm's reap takes these too (but pool and idle_only)
function M.reap(opts)
  local err
  opts, err = E.options(opts, REAP_KEYS, "sandstack.docker.reap")
  if not opts then return nil, err end
  if not (opts.all or opts.older_than or opts.project or opts.prefix or opts.pool) then
    return E.fail("invalid", "filter_required", "sandstack.docker.reap: no filter would remove every stack "
      .. "sandstack owns on the engine: pass older_than, project, prefix or pool, or all = true")
  end
  local stacks; stacks, err = M.list { docker_host = opts.docker_host, timeout = opts.timeout, project = opts.project, pool = opts.pool }
  if not stacks then return nil, err end
  local eng; eng, err = engine(opts)
  if not eng then return nil, err end
  local removed, first = {}, nil
  local t = os.time()
  for _, s in ipairs(stacks) do
    local old = not opts.older_than or (s.created and t - s.created >= opts.older_than)
    -- the engine's label filters chose them; each filter is checked again here, so that what is
    -- removed is what was asked for even from an engine (or a stand-in) that ignored one
    local match = (not opts.prefix or s.project:sub(1, #opts.prefix) == opts.prefix)
      and (not opts.project or s.project == opts.project) and (not opts.pool or s.pool == opts.pool)
    local take = old and match
    if take and opts.pool then
      take = s.state ~= "in_use" and (not opts.idle_only or s.state == "ready" or (s.marked and s.state == "failed"))
      if take and s.marked then
        local image = s.images.forwarder or select(2, next(s.images))
        local ok, e = M.mark(eng, "claim", s.project, opts.pool, "reap", image)
        if not ok then
          take = false
          if e.status ~= 409 then first = first or e end -- 409: a session claimed it first
        end
      end
    end
    if take then
      local ok, e = M.remove_project(eng, s.project)
      if ok then removed[#removed + 1] = s.project else first = first or e end
    end
  end
  eng:close()
  if first then return nil, first end
  return removed
end

-- Destroys one project by name without a handle (the CLI's `down`); opts checked by the caller.
function M.down(project, opts)
  opts = opts or {}
  local eng, err = engine(opts)
  if not eng then return nil, err end
  local ok; ok, err = M.remove_project(eng, project)
  eng:close()
  return ok, err
end


return M
