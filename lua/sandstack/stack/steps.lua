-- The executor's frame, shared by both backends' starts (docker/start.lua, swarm/start.lua): the
-- hooks taken out of the options, and the step loop with its rollback. The steps send what the C
-- core planned; this file only runs them in order and, on the first failure, has the backend
-- remove what this run made.
local M = {}

-- Splits a start's options: the hooks (on_event, req_adapter: functions that stay in Lua), the
-- backend's own keys (own: set of names, or nil) and the stack's options for the C model.
-- Misuse raises at the caller (sandstack.error; what: the public name).
function M.split(what, session_key, opts, own)
  local E = require "sandstack.error"
  E.want(session_key, "string", what, "argument 'session_key'", "a string")
  if session_key == nil then E.raise(what .. ": argument 'session_key' must be a string, got nil") end
  E.want(opts, "table", what, "argument 'opts'", "an options table")
  if opts == nil then E.raise(what .. ": argument 'opts' must be an options table, got nil") end
  local clean, hooks, mine = {}, {}, {}
  for k, v in pairs(opts) do
    if k == "on_event" or k == "req_adapter" then
      E.want(v, "function", what, k)
      hooks[k] = v
    elseif own and own[k] then
      mine[k] = v
    else
      clean[k] = v
    end
  end
  return clean, hooks, mine
end

-- The error a start raises when Ctrl-C stopped it (E.interrupted), after its rollback: what was
-- made is removed, or `left` names what could not be. Raised, not returned: an interruption
-- stops the caller too.
function M.interrupted(project, left)
  local E = require "sandstack.error"
  if left then
    return E.new("interrupted", "sigint", ("the start of %s was interrupted and rolled back, but %s is left: remove it "
      .. "with `sandstack down %s`"):format(project, tostring(left.message), project), { project = project, left = left })
  end
  return E.new("interrupted", "sigint", ("the start of %s was interrupted and rolled back: nothing of it is left")
    :format(project), { project = project })
end

-- Runs each step (a function returning a true value, or nil, err) in order. On the first that
-- fails or raises, rollback(err, raised) removes what the run made and returns what it could not
-- remove (an error naming it) or nil; a raised error (a programming error) is raised again after
-- the rollback (an interruption as M.interrupted's error for project), and a failure comes back
-- as nil, err, with what the rollback left named in it.
function M.run(steps, rollback, project)
  for _, step in ipairs(steps) do
    local ok, res, e = pcall(step)
    if not ok or not res then
      local left = rollback(ok and e or res, not ok)
      if not ok and require("sandstack.error").interrupted(res) then error(M.interrupted(project, left), 0) end
      if not ok then error(res, 0) end
      if left and type(e) == "table" then
        e.rollback_error = left
        e.message = tostring(e.message) .. "; the rollback left " .. tostring(left.message)
      end
      return nil, e
    end
  end
  return true
end

return M
