-- The `sandstack` command's runner. Each command is its own module, lua/sandstack/cli/<name>.lua,
-- found by listing that directory (a new command is a new file, and help, the guard and the
-- CLI spec cover it with no list to edit). A command module returns
--   { summary = "one line", usage = "NAME ARGS", help = "longer text (optional)",
--     options = { name = "VALUE" (takes a value) | true (a flag) }, json = true (takes --json),
--     order = n (its place in `sandstack --help`; optional), run = function(ctx, args, opts) }
-- and run returns an exit code: 0 ok, 1 failure, 2 usage (ctx: lua/sandstack/cli_kit.lua).
-- main(argv[, out[, errout]]) -> exit code. A raise inside a command is caught here and printed
-- as one line, never a traceback (SANDSTACK_DEBUG=1 adds it, for a bug report).
local kit = require "sandstack.cli_kit"

local M = {}

local FOOTER = [[
Every command takes --help. A stack is named by its session key or its project name.
Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted (Ctrl-C). Errors are one line:
sandstack: <kind>: <message>.
The engine is $DOCKER_HOST or unix:///var/run/docker.sock.]]

-- The command modules: name -> module, and the names in listing order.
function M.commands()
  local core = require "sandstack.core"
  local anchor = package.searchpath("sandstack.cli.up", package.path)
  local dir = anchor and anchor:match("^(.*)/[^/]+$")
  local names, by = {}, {}
  for _, file in ipairs(dir and core.listdir(dir) or {}) do
    local name = file:match("^([%w_]+)%.lua$")
    if name then
      local ok, mod = pcall(require, "sandstack.cli." .. name)
      if ok and type(mod) == "table" and type(mod.run) == "function" then
        by[name] = mod
        names[#names + 1] = name
      end
    end
  end
  table.sort(names, function(a, b)
    local oa, ob = by[a].order or 100, by[b].order or 100
    if oa ~= ob then return oa < ob end
    return a < b
  end)
  return by, names
end

local function usage_text(by, names)
  local lines = { "usage: sandstack <command> [options]", "       sandstack help <command> | --help | --version", "",
    "commands:" }
  for _, n in ipairs(names) do lines[#lines + 1] = ("  %-9s %s"):format(n, by[n].summary or "") end
  lines[#lines + 1] = ""
  lines[#lines + 1] = FOOTER
  return table.concat(lines, "\n") .. "\n"
end

function M.help_text(name, mod)
  local lines = { "usage: sandstack " .. (mod.usage or name), "", mod.summary or "" }
  if mod.help then lines[#lines + 1] = ""; lines[#lines + 1] = mod.help end
  lines[#lines + 1] = ""
  if mod.json then lines[#lines + 1] = "  --json       print one JSON document (its schema: docs/cli.md)" end
  lines[#lines + 1] = "  -h, --help   show this help"
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted (Ctrl-C)."
  return table.concat(lines, "\n") .. "\n"
end

local function wants_help(argv)
  for i = 2, #argv do
    if argv[i] == "--" then return false end
    if argv[i] == "--help" or argv[i] == "-h" then return true end
  end
  return false
end

-- The one-line text of a raise: a library's error object as it is; a message without the
-- "file.lua:123:" position (a user reads what, not where).
local function raised(e)
  local okc, core = pcall(require, "sandstack.core") -- the raise may be that it cannot load
  if okc and core.is_error(e) then return (tostring(e):gsub("%s*\n%s*", "; ")) end
  local msg = tostring(e):gsub("^[^\n:]*%.lua:%d+: ", ""):gsub("%s*\n%s*", "; ")
  -- the library's own refusals of a bad value start with the function's name (sandstack.x.y:)
  local kind = msg:match("^sandstack[%w_.]*:") and "invalid" or "internal"
  return kind .. ": " .. msg
end

local function dispatch(ctx, argv)
  local cmd = argv[1]
  if cmd == "--version" or cmd == "version" then
    ctx.out:write("sandstack ", require("sandstack").VERSION, "\n")
    return 0
  end
  local by, names = M.commands()
  if cmd == nil then
    ctx.err:write(usage_text(by, names))
    return 2
  end
  if cmd == "--help" or cmd == "-h" or cmd == "help" then
    local which = cmd == "help" and argv[2]
    if which and not by[which] then return ctx:usage(kit.unknown_command(which, names)) end
    ctx.out:write(which and M.help_text(which, by[which]) or usage_text(by, names))
    return 0
  end
  local mod = by[cmd]
  if not mod then return ctx:usage(kit.unknown_command(cmd, names)) end
  ctx.name = cmd
  if wants_help(argv) then
    ctx.out:write(M.help_text(cmd, mod))
    return 0
  end
  local spec = {}
  for k, v in pairs(mod.options or {}) do spec[k] = v end
  if mod.json then spec.json = true end
  local args, opts = kit.parse(argv, 2, spec)
  if not args then return ctx:usage(opts) end
  return mod.run(ctx, args, opts)
end

-- The line of an interruption (Ctrl-C): what a start that was stopped says it rolled back, or
-- that the command stopped where it was.
local function interrupted(e)
  local okc, core = pcall(require, "sandstack.core")
  if okc and core.is_error(e) then return tostring(e) end
  return "interrupted: the command was stopped (Ctrl-C)"
end

-- Exit code of an interruption: 128 + SIGINT, as a shell reports a command Ctrl-C ended.
M.INTERRUPTED = 130

function M.main(argv, o, e)
  local ctx = kit.context(o or io.stdout, e or io.stderr)
  local dbg = os.getenv("SANDSTACK_DEBUG")
  local stopped = false
  local ok, code = xpcall(dispatch, function(err)
    local okE, E = pcall(require, "sandstack.error")
    if okE and E.interrupted(err) then
      stopped = true
      return interrupted(err)
    end
    if dbg and dbg ~= "" and dbg ~= "0" then return raised(err) .. "\n" .. debug.traceback() end
    return raised(err)
  end, ctx, argv or {})
  if ok then return type(code) == "number" and code or 1 end
  ctx.err:write("sandstack: ", tostring(code), "\n")
  return stopped and M.INTERRUPTED or 1
end

return M
