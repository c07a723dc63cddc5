-- The snapshots on the engine (internal to docker/snapshot.lua): their objects' label and image
-- repository, listed from the labels of images and volumes (sandstack.docker.snapshots) and
-- removed (sandstack.docker.remove_snapshot).
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"

local M = {}
local R = core.session_requests
local failed = batch.first_error

M.LABEL = "io.sandstack.snapshot"
M.REPO = "sandstack-snapshot"

-- An engine client for opts (docker_host, timeout, api_version).
function M.engine(opts)
  local sandstack = require "sandstack"
  return sandstack.engine { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local LIST_KEYS = E.described {
  { "source", "string", type = "string", default = "all",
    refused = "not a string" },
  { "docker_host", "string", type = "string", default = "the environment's",
    refused = "" },
  { "timeout", E.SECONDS, type = "seconds", default = "60",
    refused = "not above 0" },
}

-- sandstack.docker.snapshots{source = project} -> { {id =, name =, source =, created =, image =,
-- volumes = {name, ...}}, ... } sorted by creation, from the labels of images and volumes.
function M.list(opts)
  local err
  opts, err = E.options(opts, LIST_KEYS, "sandstack.docker.snapshots")
  if not opts then return nil, err end
  local eng; eng, err = M.engine(opts)
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

local REMOVE_KEYS = E.described {
  { "docker_host", "string", type = "string", default = "the environment's",
    refused = "" },
  { "timeout", E.SECONDS, type = "seconds", default = "60",
    refused = "not above 0" },
}

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
  local eng; eng, err = M.engine(opts)
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
      -- the image, and a commit that landed after its snapshot's deadline (see docker/snapshot_take.lua)
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
