-- The sbx CLI: every call of the backend goes through run_raw, over core.sbx_run (a
-- clone-based runner with a deadline and capped streams, csrc/sbx/runner.c), or for a command
-- in a sandbox through exec, over core.sbx_exec (the same runner, the exec wrapper's framing in
-- C); a failed call becomes a typed error through classify. Internal to sandstack.sbx: b is the backend.
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

local MiB = 1024 * 1024

-- Raises the "closed" error object when b was closed: a use after close is a programming
-- error, and every sbx call and record access passes here first.
function M.live(b)
  if b.closed then error(E.new("closed", nil, "sandstack.sbx: the backend is closed"), 2) end
  return b
end

-- Turns a failed sbx call into a typed error, by the v0.45.1 texts (docs/sbx.md).
function M.classify(res, what)
  local se = res.stderr or ""
  local low = se:lower()
  if low:find("backend unavailable", 1, true) then
    return E.new("daemon_fault", "backend_unavailable",
      "the sbx daemon has lost its engine; run `sbx daemon restart` (" .. what .. ")", { stderr = se })
  end
  for _, pat in ipairs({ "sbx login", "not logged in", "log in", "unauthorized", "unauthenticated",
    "not authenticated" }) do
    if low:find(pat, 1, true) then
      return E.new("login_required", nil, "sbx is not signed in; run `sbx login` (" .. what .. ")", { stderr = se })
    end
  end
  local reason = "failed"
  if res.timed_out then reason = "timeout"
  elseif low:find("not found", 1, true) then reason = "not_found"
  elseif low:find("already exists", 1, true) then reason = "conflict"
  elseif low:find("kit startup exited with code 127", 1, true) then reason = "missing_bash" end
  local msg = se:match("error: ([^\n]*)") or se:match("([^\n]+)") or "no output"
  if reason == "missing_bash" then
    msg = "the image has no /bin/bash, which sbx needs to start a sandbox; use a template with /bin/bash (" .. msg .. ")"
  end
  -- the kind says "sbx" already (tostring is "sbx: <message>"): the command is named without it
  return E.new("sbx", reason, (what:gsub("^sbx ", "")) .. ": " .. msg, { stderr = se, exit_code = res.exit_code })
end

-- Runs `sbx args...` (opts: timeout, max_output, stdin, json); returns the result table (any exit
-- code) or nil, err when it could not run.
function M.run_raw(b, args, opts)
  M.live(b)
  opts = opts or {}
  local argv = { b.sbx_path }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return core.sbx_run(argv, { timeout = opts.timeout or b.command_timeout,
    max_output = opts.max_output or 4 * MiB, stdin = opts.stdin, json = opts.json })
end

-- Runs one command through the exec wrapper as `sbx exec -i [-u user] name ...` in one call
-- into C (core.sbx_exec: the wrapper's input, the runner, the split of stderr at the nonce).
-- job: workspace, mount, cwd, env ("K=V" list), argv, dir, timeout, max_output. Returns the
-- result table ({ran = false}: the wrapper never started; stderr is then sbx's) or nil, err.
function M.exec(b, name, user, job)
  M.live(b)
  local prefix = { b.sbx_path, "exec", "-i" }
  if user then prefix[4], prefix[5] = "-u", user end
  prefix[#prefix + 1] = name
  return core.sbx_exec(prefix, job)
end

-- Runs `sbx args...` and requires exit 0 (or an exit code in opts.ok_codes).
function M.run(b, args, opts)
  local res, err = M.run_raw(b, args, opts)
  if not res then return nil, err end
  if res.exit_code == 0 or (opts and opts.ok_codes and opts.ok_codes[res.exit_code]) then return res end
  return nil, M.classify(res, "sbx " .. table.concat(args, " ", 1, math.min(#args, 3)))
end

-- Runs `sbx args...` and decodes its JSON answer (after any daemon start-up lines), decoded in
-- the same call into C as the run.
function M.json(b, args, opts)
  local o = { json = true }
  for k, v in pairs(opts or {}) do o[k] = v end
  local res, err = M.run(b, args, o)
  if not res then return nil, err end
  if res.json_error then return E.fail("sbx", "bad_json", args[1] .. ": " .. res.json_error) end
  return res.json
end

-- The sandboxes sbx lists: name -> { name =, id =, workspaces = {...}, ... }.
function M.list(b)
  local v, err = M.json(b, { "ls", "--json" })
  if not v then return nil, err end
  local out = {}
  for _, sb in ipairs(v.sandboxes or {}) do out[sb.name] = sb end
  return out
end

return M
