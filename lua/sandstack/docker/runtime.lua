-- The `runtime` hardening option: every container of a stack runs under one engine
-- runtime, such as gVisor's "runsc". The C core checks the name's shape and puts
-- HostConfig.Runtime on every container of the plan; whether the engine knows the name is only
-- the engine's to say, so it is asked here, from GET /info's `Runtimes`, before the first
-- create. Without this check an unknown name would surface as a 400 or 500 from the first
-- container create, after the networks and volumes exist, and would need a rollback.
--
-- The refusal is { kind = "compose", reason = "invalid_option", option = "runtime",
-- runtime = <asked>, runtimes = { <registered names, sorted> } }, its message listing them.
local E = require "sandstack.error"

local M = {}

-- The names of the runtimes the engine has registered, sorted; or nil, err. answer: the settled
-- result of a GET /info the caller sent already (the start's preflight round), else it is asked.
function M.registered(eng, answer)
  answer = answer or eng:perform({ require("sandstack.core").engine_reads.info }, 30)[1]
  local info, err = answer.ok and answer.body, answer.err
  if not info then return nil, err end
  if type(info) ~= "table" or (info.Runtimes ~= nil and type(info.Runtimes) ~= "table") then
    return E.fail("engine", "bad_answer", "the engine's /info has no readable Runtimes")
  end
  local names = {}
  for name in pairs(info.Runtimes or {}) do
    if type(name) == "string" then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

-- true when `name` is nil (the engine's default runtime) or registered; else nil, err. answer: as
-- for registered.
function M.check(eng, name, answer)
  if name == nil then return true end
  local names, err = M.registered(eng, answer)
  if not names then return nil, err end
  for _, n in ipairs(names) do
    if n == name then return true end
  end
  local listed = #names > 0 and table.concat(names, ", ") or "none"
  return E.fail("compose", "invalid_option",
    ("runtime: %q is not registered with the engine (registered: %s); register it in the "
      .. "engine's daemon.json `runtimes` (see docs/runsc.md) or choose one of those"):format(name, listed),
    { option = "runtime", runtime = name, runtimes = names })
end

return M
