-- Independent Engine calls in parallel, for both backends (the host's engine, a swarm's manager
-- and nodes): one batch, every request submitted before any is waited for. Starting a stack
-- should cost its critical path, not the sum of its calls.
local E = require "sandstack.error"

local M = {}

-- One round: every request once, in one call into the C core (the engine client's perform: all
-- submitted together, each with its own deadline on the monotonic clock), which settles each
-- answer: {ok=, status=, body=, err=}, a status in the request's `ok` table counting as success
-- (304 on start/stop, 404 on delete, ...).
local function run_once(eng, reqs, deadline)
  if #reqs == 0 then return {} end
  local results = eng:perform(reqs, deadline)
  return results
end

local core = require "sandstack.core"
local sleep = core.sleep -- no child process, no LuaSocket needed

-- Container removal is done only when the engine says 2xx or 404. Its transient answers, 409
-- ("removal of container ... is already in progress") and 500 (a driver or mount still busy),
-- mean "not yet", whatever a caller's ok table says: the removal is asked again, with a
-- backoff, within a bound (REMOVE_DELAYS: about 4.5 s), so a destroy or a rollback does not
-- report success while a container still exists. One that is still there at the end is named
-- in the error (field `container`).
local REMOVE_DELAYS = { 0.1, 0.2, 0.4, 0.8, 1, 1, 1 }
M.REMOVE_ATTEMPTS = #REMOVE_DELAYS + 1

-- A request's method and path, in either form (positional, or the plan's keyed one).
local function method_path(q)
  if q[1] ~= nil then return q[1], q[2] end
  return q.method, q.path
end

local function container_removal(q)
  local method, path = method_path(q)
  return method == "DELETE" and path:match("^/containers/([^/?]+)$")
end

local function transient(r) return r.status == 409 or r.status == 500 end

local function not_removed(q, r, attempts)
  local id = container_removal(q)
  local msg = type(r.body) == "table" and r.body.message or (type(r.body) == "string" and r.body) or ""
  local method, path = method_path(q)
  return { ok = false, status = r.status, body = r.body,
    err = E.new("engine", nil, ("container %s could not be removed after %d attempts: %s %s"):format(
      id, attempts, tostring(r.status), msg),
      { status = r.status, method = method, path = path, container = id, attempts = attempts }) }
end

-- reqs: list of {method, path, body, opts, ok = {[status]=true}}; returns results in order.
-- deadline: seconds for the whole batch (per round).
function M.run(eng, reqs, deadline)
  local results = run_once(eng, reqs, deadline)
  for attempt = 1, #REMOVE_DELAYS + 1 do
    local again, idx = {}, {}
    for i, q in ipairs(reqs) do
      if container_removal(q) and transient(results[i]) then
        if attempt > #REMOVE_DELAYS then results[i] = not_removed(q, results[i], attempt)
        else again[#again + 1] = q; idx[#idx + 1] = i end
      end
    end
    if #again == 0 then break end
    sleep(REMOVE_DELAYS[attempt])
    for k, r in ipairs(run_once(eng, again, deadline)) do results[idx[k]] = r end
  end
  for i, q in ipairs(reqs) do
    local r = results[i]
    if not r.ok and r.status and container_removal(q) and not (r.err and r.err.container) then
      results[i] = not_removed(q, r, 1)
    end
  end
  return results
end

-- The first failure of a batch, or nil.
function M.first_error(results)
  for _, r in ipairs(results) do if not r.ok then return r.err end end
end

-- One round of removals, whatever is refused (an endpoint may outlive its container by a
-- moment) asked again a few times; 404 is success. Returns the last failure, or nil.
local function remove_round(eng, reqs)
  for attempt = 1, 4 do
    local r = M.run(eng, reqs, 60)
    local again = {}
    for i, x in ipairs(r) do if not x.ok then again[#again + 1] = reqs[i] end end
    if #again == 0 then return nil end
    if attempt == 4 then return M.first_error(r) end
    reqs = again
    sleep(0.2 * attempt)
  end
end

-- Sends a teardown's three rounds in compose's order: the container removals (forced, with
-- anonymous volumes; retried on the engine's transient answers, see M.run), then the networks,
-- then the volumes. Each round waits for the one before, so no network or volume goes while a
-- container of the stack may still hold it, and the engine's events read in that order. The
-- requests are the C core's (csrc/stack/requests.c): a plan's removals, or core.stack_removals
-- of names. Returns true or nil, err (the first failure; a failure never stops a later round).
function M.remove_requests(eng, containers, networks, volumes)
  local first = M.first_error(M.run(eng, containers or {}, 60))
  for _, round in ipairs { networks or {}, volumes or {} } do
    local err = remove_round(eng, round)
    first = first or err
  end
  if first then return nil, first end
  return true
end

-- Deletes objects by id or name. objs = {containers = {...}, networks = {...}, volumes = {...}}.
function M.remove(eng, objs)
  local r = core.stack_removals(objs)
  return M.remove_requests(eng, r.containers, r.networks, r.volumes)
end

-- The three label-filtered lists (containers incl. stopped, networks, volumes) as requests,
-- to run in one parallel batch, possibly together with other work.
M.list_requests = core.stack_list_requests

return M
