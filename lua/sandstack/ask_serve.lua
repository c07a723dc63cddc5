-- The callback form of the egress ask hook (docs/egress-ask.md): on_ask(ask) is called for each
-- pending ask and returns "allow" or "deny" and optionally { remember =, reason =, by = }; the
-- answer is sent at once. h:serve(seconds, { on_ask = }) and pool:serve{ on_ask = } both run it.
local A = require "sandstack.docker.apply"
local E = require "sandstack.error"

local M = {}

-- One pass over a session's asks: list() -> asks | nil, err; answer(id, decision, opts) as
-- h:answer. A callback that raises, or returns anything but "allow"/"deny", leaves its ask
-- pending (the proxy's ask_timeout then refuses it). Returns the number answered, or nil, err.
function M.pass(list, answer, on_ask)
  local asks, err = list()
  if not asks then return nil, err end
  local n = 0
  for _, a in ipairs(asks) do
    local ok, decision, opts = pcall(on_ask, a)
    if not ok and E.interrupted(decision) then error(decision, 0) end
    if ok and (decision == "allow" or decision == "deny") then
      opts = type(opts) == "table" and opts or {}
      local r, aerr = answer(a.id, decision, { remember = opts.remember, reason = opts.reason, by = opts.by or "on_ask" })
      if r then n = n + 1
      elseif aerr.kind ~= "not_found" then return nil, aerr end -- gone meanwhile: its client left
    elseif not ok then
      io.stderr:write("sandstack: on_ask failed: ", tostring(decision), "\n")
    end
  end
  return n
end

local SERVE_KEYS = E.described {
  { "on_ask", "function", type = "function(ask) -> decision, opts", default = "none",
    refused = "not a function" },
  { "interval", { "number", min = 0.01, says = "a number of seconds >= 0.01", wanted = "a number of seconds" }, type = "seconds", default = "`0.25`",
    refused = "below 0.01" },
}

-- h:serve(seconds, { on_ask =, interval = 0.25 }): answers asks for `seconds` (once when 0).
-- Returns { answered = n }, or nil, err at the first error that is not an ask gone meanwhile.
function M.serve(h, seconds, opts)
  local err
  opts, err = E.options(opts, SERVE_KEYS, "serve")
  if not opts then return nil, err end
  if opts.on_ask == nil then E.raise('serve: option \'on_ask\' must be a function(ask) returning "allow" or "deny", got nil') end
  E.want(seconds, "number", "serve", "argument 'seconds'", "a number of seconds")
  if seconds == nil then E.raise("serve: argument 'seconds' must be a number of seconds, got nil") end
  if not (seconds >= 0) then return E.refuse("serve", "argument 'seconds'", "must be a number of seconds >= 0") end
  local interval = opts.interval or 0.25
  local stop, answered = A.now() + seconds, 0
  repeat
    local t0 = A.now()
    local n, err = M.pass(function() return h:egress_asks() end,
      function(id, d, o) return h:answer(id, d, o) end, opts.on_ask)
    if not n then return nil, err end
    answered = answered + n
    local rest = math.min(interval - (A.now() - t0), stop - A.now())
    if rest > 0 then A.sleep(rest) end
  until A.now() >= stop
  return { answered = answered }
end

return M
