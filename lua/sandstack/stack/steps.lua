-- The executor's frame, shared by both backends' starts (docker/start.lua, swarm/start.lua): the
-- hooks taken out of the options, and the step loop with its rollback. The steps send what the C
-- core planned; this file only runs them in order and, on the first failure, has the backend
-- remove what this run made.
local M = {}

-- Splits a start's options: the hooks (on_event, req_adapter: functions that stay in Lua), the
-- backend's own keys (own: set of names, or nil) and the stack's options for the C model.
-- Misuse raises at `level` as the caller of M.split counts it (what: the public name).
function M.split(what, session_key, opts, own, level)
  level = level + 1
  if type(session_key) ~= "string" then error(what .. ": session_key must be a string", level) end
  if type(opts) ~= "table" then error(what .. ": options must be a table", level) end
  local clean, hooks, mine = {}, {}, {}
  for k, v in pairs(opts) do
    if k == "on_event" or k == "req_adapter" then
      if type(v) ~= "function" then error(what .. ": " .. k .. " must be a function", level) end
      hooks[k] = v
    elseif own and own[k] then
      mine[k] = v
    else
      clean[k] = v
    end
  end
  return clean, hooks, mine
end

-- Runs each step (a function returning a true value, or nil, err) in order. On the first that
-- fails or raises, rollback(err, raised) removes what the run made and returns what it could not
-- remove (an error naming it) or nil; a raised error (a programming error) is raised again after
-- the rollback, and a failure comes back as nil, err, with what the rollback left named in it.
function M.run(steps, rollback)
  for _, step in ipairs(steps) do
    local ok, res, e = pcall(step)
    if not ok or not res then
      local left = rollback(ok and e or res, not ok)
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
