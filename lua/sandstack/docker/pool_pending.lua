-- A pooled stack handed to its session before the engine answered its claim (internal to
-- sandstack.docker.pool). The rename of the ready mark and the session's record are in flight; the
-- handle completes them before the first method the session calls runs (close included), or when
-- the pool closes. A claim that failed there (the rename lost to another host's claimant or a reap,
-- the record refused, no answer) has taken the stack down already; that method and every later one
-- but close return the error, so the session learns it on its next call, never silently.
-- The claim is a named state of the handle, its field `_claim`: "pending", then "completing"
-- while finish runs (a method finish calls on the handle runs as it is), then gone (a plain
-- handle again) or "failed" with its error. The handle's methods settle it first
-- (docker/handle.lua, M.settle); the handle's class stays what it is.
local M = {}

-- Makes `stack`'s claim pending: finish() -> true, or nil, err, run once. Returns the
-- completion, callable by the pool too (the same once-only result: true, or false, err).
function M.defer(stack, finish)
  local claim = { state = "pending" }
  function claim.settle()
    if claim.state == "pending" then
      claim.state = "completing"
      local ok, err = finish()
      if ok == true then
        claim.state = "done"
        if rawget(stack, "_claim") == claim then stack._claim = nil end
      else
        claim.state, claim.err = "failed", err
      end
    end
    if claim.state == "failed" then return false, claim.err end
    return true
  end
  stack._claim = claim
  return claim.settle
end

-- Before a method of `stack` runs: true when no claim is in flight (or it completed, or it is
-- completing now), else false and the failed claim's error.
function M.settle(stack)
  local claim = type(stack) == "table" and rawget(stack, "_claim")
  if not claim then return true end
  return claim.settle()
end

-- The methods of a handle class `cls`, each settling the claim first: a failed claim is the
-- answer of every method but close, which settles and closes. The finalizer (__gc) stays as it
-- is: no engine round in a finalizer. skip(fn): a function left as it is (the session class's
-- methods, which settle through their driver).
function M.wrap(cls, skip)
  for name, fn in pairs(cls) do
    if type(fn) == "function" and name:sub(1, 2) ~= "__" and not skip(fn) then
      if name == "close" then
        cls[name] = function(self, ...)
          M.settle(self)
          return fn(self, ...)
        end
      else
        cls[name] = function(self, ...)
          local ok, err = M.settle(self)
          if not ok then return nil, err end
          return fn(self, ...)
        end
      end
    end
  end
  cls.__close = cls.close
  return cls
end

return M
