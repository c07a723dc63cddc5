-- The claim of one idle pooled stack as a small state machine, the same for every placement
-- (internal to the pools: docker/pool_claim.lua and swarm/pool.lua drive it, each with its own
-- work in each state). A claim passes some of these states, in this order of meaning:
--   picked    an idle stack chosen and its claim sent to the arbiter (Docker: the rename of its
--             ready mark, in flight; Swarm: the claim mark's create)
--   claimed   the arbiter's answer: this claim won the stack
--   placed    the node the stack runs on, and a client of its engine (Swarm)
--   planned   the session's plan made (no engine call)
--   handle    the session's handle made on the stack
--   handed    the session's policy, credentials and model key in the stack's proxy
--   deferred  the session answered before the arbiter (Docker, a stack held in this host's store):
--             the handle completes the claim on its first call (docker/pool_pending.lua)
--   ready     the claim complete: the handle is the session's
-- and the ends of one that did not complete:
--   lost         another claimant won the stack
--   failed       a step failed
--   rolled_back  what this claim made (its handle, a node's client, the claimed stack itself)
--                undone, the newest first; only when it made something
-- Every state entered is reported as a timing event: it is appended to t.states (the acquire's
-- table, pool.last_acquire: the states of its latest claim, in order, a list; t.project names
-- the stack it claimed; the table stays JSON-safe), and a step's time goes
-- to t under the step's name (plan, claim, node, handle, mark, record, after; egress is the
-- hand-over's). claim and record add up over the tries of one acquire; the others are set.
local M = {}

local NEXT = {
  start = { picked = true },
  picked = { claimed = true, planned = true, lost = true, failed = true },
  claimed = { placed = true, planned = true, handle = true, ready = true, lost = true, failed = true },
  placed = { planned = true, failed = true },
  planned = { claimed = true, handle = true, lost = true, failed = true },
  handle = { handed = true, claimed = true, lost = true, failed = true },
  handed = { claimed = true, deferred = true, ready = true, lost = true, failed = true },
  deferred = { claimed = true, lost = true, failed = true },
  lost = { rolled_back = true },
  failed = { rolled_back = true },
}
M.NEXT = NEXT

local ADDED = { claim = true, record = true }

-- A reporter of step times into the table tt: report(step, seconds).
function M.timings(tt)
  return function(step, seconds)
    if ADDED[step] then tt[step] = (tt[step] or 0) + seconds else tt[step] = seconds end
  end
end

local Claim = {}
Claim.__index = Claim

-- A claim of `project` reporting into t (pool.last_acquire): in state "start", nothing made.
function M.new(t, project)
  local c = setmetatable({ t = t, project = project, state = "start", states = {}, undo = {},
    report = M.timings(t) }, Claim)
  t.states, t.project = c.states, project
  t.tries = (t.tries or 0) + 1
  return c
end

-- Enters `state` (a move NEXT does not allow is a programming error), reporting it; with step,
-- the step's time too.
function Claim:to(state, step, seconds)
  if not NEXT[self.state] or not NEXT[self.state][state] then
    error("pool claim: no move from " .. self.state .. " to " .. state, 2)
  end
  self.state = state
  self.states[#self.states + 1] = state
  if step then self.report(step, seconds) end
end

-- What this claim made, undone by undo() if it does not complete (the newest first).
function Claim:made(undo)
  self.undo[#self.undo + 1] = undo
end

-- Forgets what was made (the session's now, or handed to something else that undoes it).
function Claim:keep()
  self.undo = {}
end

-- The claim ends without its stack: failed (or lost, when another claimant won), then what it
-- made rolled back. Returns nil, err, lost: the answer of the pools' claim (err may say how it
-- was lost).
function Claim:fail(err, lost)
  self:to(lost and "lost" or "failed")
  local undo = self.undo
  self.undo = {}
  for i = #undo, 1, -1 do undo[i]() end
  if #undo > 0 then self:to("rolled_back") end
  return nil, err, lost
end

return M
