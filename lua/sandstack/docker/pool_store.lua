-- A warm pool's idle stacks as this host knows them (internal to sandstack.docker.pool). A pooled
-- stack whose proxy is reached by its control socket has a control directory on this host,
-- <ROOT>/<project>/ (docker/control.lua; down, reap and a rollback remove it). Once the filler has
-- set the stack's ready mark, it writes there a file `pool-ready`: the pool's name, the port the
-- forwarder publishes and the placeholders the sandbox holds, all an acquire needs besides the
-- engine's rename.
--
-- An acquire on this host claims a file with an exclusive flock (core.claim_file) before it asks
-- the engine for the rename: processes on this host then never race at the engine, and need no
-- container list to find an idle stack. The engine's rename stays the arbiter with everything
-- else (a process on another host, reap, the pool's close): the session's egress and credentials
-- go to the stack only after the rename has won. After the rename, won or lost, the claimant moves
-- the file to `pool-claimed` while it holds the lock, so no later claimant tries that stack again. A
-- claimant that dies between the lock and the move loses its lock with its life: the next one
-- takes the file, and the rename tells it whether the stack is still idle. An acquire that answers
-- its session before the rename returns first moves the file to `pool-claimed` durably, keeping the
-- lock until the rename's answer (M.mark_claimed).
--
-- What the store does not see: whether every service still runs. pool:serve's pass lists the
-- pool's containers and removes the stacks whose service stopped.
local core = require "sandstack.core"
local control = require "sandstack.docker.control"

local M = {}

M.READY, M.CLAIMED = "pool-ready", "pool-claimed"

local function ready_path(project) return control.dir(project) .. "/" .. M.READY end
local function claimed_path(project) return control.dir(project) .. "/" .. M.CLAIMED end

-- Whether a stack's idle state can be kept on this host: its proxy is reached by the socket.
function M.usable(stack)
  local px = type(stack) == "table" and type(stack.plan) == "table" and stack.plan.proxy
  return type(px) == "table" and px.control == "socket"
end

-- Writes a marked stack's file. true, or nil, err (the stack is then found by the container list).
function M.publish(pool_name, stack)
  if not M.usable(stack) then return nil end
  local placeholders = {}
  for _, c in ipairs(stack.plan.credentials or {}) do
    if type(c.name) == "string" and type(c.placeholder) == "string" then placeholders[c.name] = c.placeholder end
  end
  local body = core.json_encode({ pool = pool_name, project = stack.project, port = stack.port,
    placeholders = placeholders })
  return core.write_file_durable(ready_path(stack.project), body)
end

local function pattern(pool_name)
  return "^" .. pool_name:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0") .. "%-%x+$"
end

-- The projects of the pool that have a file here (idle or being claimed), in random order, so that
-- processes acquiring at once rarely try the same one first.
function M.candidates(pool_name)
  local names = core.listdir(control.ROOT)
  if not names then return {} end
  local pat, out = pattern(pool_name), {}
  for _, n in ipairs(names) do
    if n:match(pat) then out[#out + 1] = n end
  end
  for i = #out, 2, -1 do
    local j = tonumber(core.random_hex(2), 16) % i + 1
    out[i], out[j] = out[j], out[i]
  end
  return out
end

-- Claims the file of one stack: { project =, port =, placeholders =, claim = } (the lock held
-- until M.settle); or nil, "held" (another process here holds it) or nil, "gone" (no file, or
-- one claimed already).
function M.take_project(pool_name, project)
  local claim, body = core.claim_file(ready_path(project))
  if not claim then return nil, body == "held" and "held" or "gone" end
  local ok, rec = pcall(core.json_decode, body)
  if ok and type(rec) == "table" and rec.pool == pool_name and rec.project == project and type(rec.port) == "number" then
    return { project = project, port = rec.port, placeholders = type(rec.placeholders) == "table" and rec.placeholders
      or {}, claim = claim }
  end
  claim:move(claimed_path(project)) -- not a file this pool wrote: never tried again
  return nil, "gone"
end

-- Claims the file of one idle stack of the pool (as M.take_project), or nil when no file here is free.
function M.take(pool_name)
  for _, project in ipairs(M.candidates(pool_name)) do
    local entry = M.take_project(pool_name, project)
    if entry then return entry end
  end
  return nil
end

-- Before a session is answered ahead of the engine's rename: the file moved to `pool-claimed`,
-- durably, with the lock still held. From here on a crash never lets this host hand the stack out
-- again (it may hold the session's secrets): the store no longer offers it, an acquire that finds
-- it in the container list skips it, and list/serve read it as claimed (M.claimed_here). true, or
-- nil, err (the claim is then kept as it was).
function M.mark_claimed(entry)
  local ok, err = entry.claim:rename(claimed_path(entry.project))
  if not ok then return nil, err end
  entry.marked = true
  return true
end

-- After the engine's answer to the rename: `done` (won or lost) moves the file away, so nobody
-- tries the stack again; otherwise (no answer) the file is left for the next claimant. A file
-- marked claimed stays so (its lock is only released). An entry whose claim completes later
-- (entry.pending) is left to that completion.
function M.settle(entry, done)
  if not entry.claim or entry.pending then return end
  if done and not entry.marked then entry.claim:move(claimed_path(entry.project)) else entry.claim:release() end
  entry.claim = nil
end

-- Whether this host handed a stack to a session that the engine may still show idle (its ready
-- mark not renamed): "claiming" (the claimant holds the file: its rename is in flight), "orphan"
-- (nobody holds it: the claimant died before the engine's answer, or it was answered already),
-- or nil (no such file here).
function M.claimed_here(project)
  local claim, why = core.claim_file(claimed_path(project))
  if claim then
    claim:release()
    return "orphan"
  end
  if why == "held" then return "claiming" end
  return nil
end

-- A claimed stack's file back to idle (a stack handed back to the pool, e.g. by a bench).
function M.unclaim(project)
  return os.rename(claimed_path(project), ready_path(project))
end

return M
