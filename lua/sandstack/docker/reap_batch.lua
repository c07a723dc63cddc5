-- Many stacks removed in one pass (the CLI's `reap`; internal to sandstack.docker). One listing
-- of everything sandstack owns on the engine, then the teardown's three rounds (containers,
-- networks, volumes) for the chosen stacks together, each round one batch the engine client
-- runs concurrently. Removing N stacks one at a time listed the engine twice per stack, and the
-- engine scans every object it holds for each list: N² work, minutes at a few hundred stacks.
local core = require "sandstack.core"
local batch = require "sandstack.stack.batch"
local inventory = require "sandstack.docker.inventory"

local M = {}

local LABEL, CREATED = "io.sandstack.project", "io.sandstack.created"

-- Stacks per round: a round's deadline (60 s, stack/batch.lua) holds a few hundred removals at
-- the client's connection bound.
M.CHUNK = 100

local function add(into, project, what)
  into[project] = into[project] or { containers = {}, networks = {}, volumes = {} }
  local t = into[project][what[1]]
  t[#t + 1] = what[2]
end

-- The chosen projects' objects, by project, from one listing; the age is checked again on the
-- objects as listed now (a stack made again under the same name since the caller's own listing
-- is younger and stays). Returns { project -> {containers =, networks =, volumes =} }.
local function objects_of(eng, chosen, older_than, now)
  local r = batch.run(eng, batch.list_requests(LABEL), 120)
  local err = batch.first_error(r)
  if err then return nil, err end
  local objs; objs, err = inventory.checked_lists(r[1].body, r[2].body, r[3].body)
  if not objs then return nil, err end
  local by, young = {}, {}
  local function take(labels, what)
    local p = type(labels) == "table" and labels[LABEL]
    if not (p and chosen[p]) then return end
    local created = tonumber(labels[CREATED] or "")
    if older_than and created and now - created < older_than then young[p] = true end
    add(by, p, what)
  end
  for _, c in ipairs(objs.containers) do take(c.Labels, { "containers", c.Id }) end
  for _, n in ipairs(objs.networks) do take(n.Labels, { "networks", n.Name }) end
  for _, v in ipairs(objs.volumes) do take(v.Labels, { "volumes", v.Name }) end
  for p in pairs(young) do by[p] = nil end
  return by
end

-- remove(projects, opts) -> the projects removed (in the order given), or nil, err with
-- err.removed (those removed before the failure). opts: docker_host, timeout, older_than
-- (seconds, checked again on the engine's labels now).
function M.remove(projects, opts)
  opts = opts or {}
  local eng, err = require("sandstack").engine { host = opts.docker_host, timeout = opts.timeout }
  if not eng then return nil, err end
  local chosen = {}
  for _, p in ipairs(projects) do chosen[p] = true end
  local by; by, err = objects_of(eng, chosen, opts.older_than, os.time())
  if not by then eng:close() return nil, err end
  local removed, todo = {}, {}
  for _, p in ipairs(projects) do if by[p] then todo[#todo + 1] = p end end
  local a = core.engine_address(eng.host)
  local unix = a and a.unix_path
  for i = 1, #todo, M.CHUNK do
    local objs, part = { containers = {}, networks = {}, volumes = {} }, {}
    for j = i, math.min(i + M.CHUNK - 1, #todo) do
      local p = todo[j]
      part[#part + 1] = p
      for kind, list in pairs(by[p]) do
        for _, x in ipairs(list) do objs[kind][#objs[kind] + 1] = x end
      end
    end
    local ok; ok, err = batch.remove(eng, objs)
    if not ok then
      eng:close()
      err.removed = removed
      return nil, err
    end
    for _, p in ipairs(part) do
      -- the added proxy's control directory, as a single stack's removal takes it
      if unix then
        local _, derr = require("sandstack.docker.control").remove(p)
        if derr then eng:close() derr.removed = removed return nil, derr end
      end
      removed[#removed + 1] = p
    end
  end
  eng:close()
  return removed
end

return M
