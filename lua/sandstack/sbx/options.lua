-- Option values of the sbx backend, checked like the stack's (docs/api/README.md, "Conventions"):
-- a value of the right type that is refused is { kind = "invalid", reason = "invalid_option",
-- option = <name> }; a wrong type or an unknown key raises at the caller. Internal to sandstack.sbx.
local E = require "sandstack.error"

local M = {}

local function refuse(what, name, v, wanted)
  return E.fail("invalid", "invalid_option", ("%s: %s must be %s (got %s)"):format(what, name, wanted, tostring(v)),
    { option = name })
end

local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end

-- A byte budget: a positive integer (1.5, 0 and -1 are refused; "8" raises).
function M.budget(v, name, what)
  E.want(v, "number", what, name, "a positive integer")
  if finite(v) and v >= 1 and v == math.floor(v) then return v end
  return refuse(what, name, v, "a positive integer")
end

-- A deadline in seconds: a positive finite number (inf and nan are refused; true and "600" raise).
function M.seconds(v, name, what)
  E.want(v, "number", what, name, "a number of seconds")
  if finite(v) and v > 0 then return v end
  return refuse(what, name, v, "a positive number of seconds")
end

-- sbx create's --memory: a positive integer count with an optional k, m, g or t unit
-- ("2g", "1024m"), or a positive integer number of bytes.
local function memory(v, name, what)
  E.want(v, "string|number", what, name, 'a size such as "2g" or a number of bytes')
  if type(v) == "string" and v:match("^[1-9]%d*[kKmMgGtT]?$") then return v end
  if finite(v) and v >= 1 and v == math.floor(v) then return v end
  return refuse(what, name, v, 'a size such as "2g" or "1024m"')
end

local checks = {
  cpus = M.budget, memory = memory, max_output_bytes = M.budget,
  exec_cleanup_timeout = M.seconds, command_timeout = M.seconds, create_timeout = M.seconds, exec_timeout = M.seconds,
}

local strings = { sbx_path = true, workspace_root = true, name_prefix = true, storage_base = true }

-- Every value of the backend's options table that is given; true, or nil, err.
function M.backend(opts)
  for k, v in pairs(opts) do
    if checks[k] then
      local ok, err = checks[k](v, k, "sbx.backend")
      if not ok then return nil, err end
    elseif strings[k] then
      E.want(v, "string", "sbx.backend", k)
      if v == "" then return refuse("sbx.backend", k, v, "a non-empty string") end
    end
  end
  return true
end

-- exec's options (keys already checked): timeout, max_output_bytes, cwd, user, env.
function M.exec(opts)
  local ok, err = true, nil
  if opts.timeout ~= nil then ok, err = M.seconds(opts.timeout, "timeout", "exec") end
  if ok and opts.max_output_bytes ~= nil then ok, err = M.budget(opts.max_output_bytes, "max_output_bytes", "exec") end
  if not ok then return nil, err end
  for _, k in ipairs({ "cwd", "user" }) do
    E.want(opts[k], "string", "exec", k)
    if opts[k] ~= nil and (opts[k] == "" or opts[k]:find("%z")) then
      return refuse("exec", k, opts[k], "a non-empty string without NUL")
    end
  end
  E.want(opts.env, "table", "exec", "env")
  return true
end

return M
