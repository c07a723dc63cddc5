-- What the `sandstack` commands share (lua/sandstack/cli.lua runs them): the argument parser,
-- the context a command writes through (one-line errors, usage errors, JSON), durations, the
-- lookup of a stack by session key or project name, and the progress display of a start.
local M = {}

-- parse(argv, from, spec) -> args, opts | nil, message. spec: name -> true (a flag) or a
-- string (the option takes a value; the string names it). Takes --name value, --name=value and
-- "--" (everything after it is an argument).
function M.parse(argv, from, spec)
  local args, opts = {}, {}
  local i = from
  while i <= #argv do
    local a = argv[i]
    if a == "--" then
      for j = i + 1, #argv do args[#args + 1] = argv[j] end
      break
    end
    local key, inline = a:match("^%-%-([%w][%w%-]*)=(.*)$")
    key = key or a:match("^%-%-([%w][%w%-]*)$")
    if key then
      local kind = spec[key]
      if not kind then return nil, "unknown option --" .. key end
      if kind == true then
        if inline then return nil, "--" .. key .. " takes no value" end
        opts[key] = true
        i = i + 1
      else
        local v = inline
        if v == nil then
          v = argv[i + 1]
          if v == nil then return nil, "--" .. key .. " needs a value (" .. kind .. ")" end
          i = i + 1
        end
        opts[key] = v
        i = i + 1
      end
    elseif a:match("^%-%a") then
      return nil, "unknown option " .. a
    else
      args[#args + 1] = a
      i = i + 1
    end
  end
  return args, opts
end

-- The edit distance of two short strings (for "did you mean").
function M.distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- The nearest of names to s when it is near enough to be a likely typo, else nil.
function M.nearest(s, names)
  local best, bd
  for _, n in ipairs(names) do
    local d = M.distance(s, n)
    if not bd or d < bd then best, bd = n, d end
  end
  if bd and bd <= math.max(2, math.floor(#s / 3)) then return best end
end

function M.unknown_command(name, names)
  local near = M.nearest(name, names)
  return ("unknown command %q%s"):format(name, near and (" (did you mean " .. near .. "?)") or "")
end

-- A duration: 90s, 30m, 1h, 2d, or plain seconds. -> seconds, or nil when s is none of these.
local UNIT = { s = 1, m = 60, h = 3600, d = 86400 }
function M.duration(s)
  if type(s) ~= "string" then return nil end
  local n, u = s:match("^(%d+%.?%d*)([smhd]?)$")
  if not n then return nil end
  return tonumber(n) * UNIT[u ~= "" and u or "s"]
end

-- Seconds as a short age: 42s, 17m, 5h, 3d; "-" when unknown.
function M.age(created, now)
  if not created then return "-" end
  local s = math.max(0, (now or os.time()) - created)
  if s < 120 then return ("%ds"):format(s) end
  if s < 7200 then return math.floor(s / 60) .. "m" end
  if s < 172800 then return math.floor(s / 3600) .. "h" end
  return math.floor(s / 86400) .. "d"
end

-- The stacks a user means by NAME: the stack whose project is NAME, else those whose session key
-- is NAME (a key is the library's name for a session; the project is sandstack-<key> unless the
-- options named it). stacks: docker.list's answer.
function M.find(stacks, name)
  local by_key = {}
  for _, s in ipairs(stacks) do
    if s.project == name then return { s } end
    if s.session_key == name then by_key[#by_key + 1] = s end
  end
  return by_key
end

function M.isatty(fd)
  local r = os.execute(("test -t %d"):format(fd))
  return r == true or r == 0
end

-- What a rollback removed, as "2 containers, 2 networks", or nil when it had nothing to remove.
local function removed(ev)
  local parts = {}
  for _, k in ipairs { "containers", "networks", "volumes", "services", "overlays" } do
    local n = tonumber(ev[k]) or 0
    if n > 0 then parts[#parts + 1] = ("%d %s"):format(n, n == 1 and k:sub(1, -2) or k) end
  end
  return #parts > 0 and table.concat(parts, ", ") or nil
end

-- Progress of a start: one line per service redrawn in place on a terminal, plain lines
-- otherwise. A wait names what it waits for (the port and path of readiness, a healthcheck).
-- A failure is not a progress line (the error line after it says what failed), and a rollback
-- is one only when it removed something: a start refused before it made anything says so in
-- its error alone.
function M.progress(out, tty)
  local order, state, drawn = {}, {}, 0
  return function(ev)
    if ev.phase == "failed" then return end
    local gone = ev.phase == "rolled_back" and removed(ev)
    if ev.phase == "rolled_back" and not gone and not ev.error then return end
    local svc = ev.service or (ev.network and "network") or (ev.volume and "volume") or ev.phase
    local what = tostring(ev.phase):gsub("_", " ")
    if gone then what = "rolled back: removed " .. gone end
    if ev.error then what = what .. "; left: " .. tostring(ev.error.message or ev.error) end
    if ev.network then what = what .. " " .. ev.network end
    if ev.volume then what = what .. " " .. ev.volume end
    if ev.port then what = what .. " on port " .. ev.port end
    if ev.path then what = what .. " for GET " .. ev.path .. " 2xx" end
    if ev.agent_port then what = what .. " from the agent's port " .. ev.agent_port end
    if ev.timeout then what = what .. (" (up to %gs)"):format(ev.timeout) end
    if not tty then -- a line as it happens, also into a pipe or a file
      out:write(("%7.2fs %-12s %s\n"):format(ev.elapsed or 0, svc, what))
      if out.flush then out:flush() end
      return
    end
    if not state[svc] then order[#order + 1] = svc end
    state[svc] = ("%7.2fs %s"):format(ev.elapsed or 0, what)
    if drawn > 0 then out:write(("\27[%dA"):format(drawn)) end
    for _, s in ipairs(order) do out:write(("\27[2K%-12s %s\n"):format(s, state[s])) end
    drawn = #order
    if out.flush then out:flush() end
  end
end

local Ctx = {}
Ctx.__index = Ctx

-- ctx:fail(err) or ctx:fail(kind, message) -> 1, after one line on stderr:
-- "sandstack: <kind>: <message>". err: a library error (its tostring is "kind: message") or a
-- plain message (kind "failed").
function Ctx:fail(err, message)
  local text
  if message then
    text = tostring(err) .. ": " .. tostring(message)
  elseif require("sandstack.core").is_error(err) then
    text = tostring(err)
  else
    text = "failed: " .. tostring(err)
  end
  self.err:write("sandstack: ", (text:gsub("%s*\n%s*", "; ")), "\n")
  return 1
end

-- ctx:usage(message) -> 2, after "sandstack: usage: <message> (see sandstack <cmd> --help)".
function Ctx:usage(message)
  local see = self.name and (" (see sandstack " .. self.name .. " --help)") or " (see sandstack --help)"
  self.err:write("sandstack: usage: ", message, see, "\n")
  return 2
end

-- The CLI's JSON: the core's encoder cannot say null, nor tell an empty list from an empty
-- object, and a schema (docs/cli.md) needs both. M.NULL is null; M.array(t) marks t a list.
M.NULL = setmetatable({}, { __name = "null" })
local ARRAY = {}
function M.array(t) return setmetatable(t or {}, ARRAY) end

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
local function encode(v, buf)
  local t = type(v)
  if v == M.NULL or v == nil then
    buf[#buf + 1] = "null"
  elseif t == "boolean" then
    buf[#buf + 1] = tostring(v)
  elseif t == "number" then
    buf[#buf + 1] = (v == math.floor(v) and v > -2 ^ 53 and v < 2 ^ 53) and ("%d"):format(v) or ("%.17g"):format(v)
  elseif t == "string" then
    buf[#buf + 1] = '"' .. v:gsub('[%c"\\]', function(c) return ESC[c] or ("\\u%04x"):format(c:byte()) end) .. '"'
  elseif t == "table" and (getmetatable(v) == ARRAY or (v[1] ~= nil)) then
    buf[#buf + 1] = "["
    for i, x in ipairs(v) do
      if i > 1 then buf[#buf + 1] = "," end
      encode(x, buf)
    end
    buf[#buf + 1] = "]"
  elseif t == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    buf[#buf + 1] = "{"
    for i, k in ipairs(keys) do
      if i > 1 then buf[#buf + 1] = "," end
      encode(k, buf)
      buf[#buf + 1] = ":"
      encode(v[k], buf)
    end
    buf[#buf + 1] = "}"
  else
    buf[#buf + 1] = '"' .. tostring(v) .. '"'
  end
end
function M.encode(v)
  local buf = {}
  encode(v, buf)
  return table.concat(buf)
end

-- ctx:json(value) -> 0, after value as one JSON document on stdout.
function Ctx:json(value)
  self.out:write(M.encode(value), "\n")
  return 0
end

function Ctx:docker() return require("sandstack").docker end

-- ctx:load(file, what) -> the table FILE returns (and its second value), or nil, err (kind "invalid").
function Ctx:load(file, what)
  local E = require "sandstack.error"
  local chunk, lerr = loadfile(file)
  if not chunk then return nil, E.new("invalid", "file", tostring(lerr)) end
  local ok, v, second = pcall(chunk)
  if not ok then return nil, E.new("invalid", "file", file .. " raised: " .. tostring(v)) end
  if type(v) ~= "table" then
    return nil, E.new("invalid", "file", file .. " must return " .. what .. ", got " .. type(v))
  end
  return v, second
end

-- ctx:stack(name) -> the one stack NAME (a session key or a project) names, or nil, code after
-- the error line (not found: 1).
function Ctx:stack(name, stacks)
  if not stacks then
    local err
    stacks, err = self:docker().list()
    if not stacks then return nil, self:fail(err) end
  end
  local found = M.find(stacks, name)
  if #found == 0 then
    return nil, self:fail("not_found", ("no stack has the project name or session key %q (sandstack ls lists them)"):format(name))
  end
  if #found > 1 then
    local ps = {}
    for _, s in ipairs(found) do ps[#ps + 1] = s.project end
    return nil, self:fail("ambiguous", ("session key %q is held by %d stacks (%s): name one by its project"):format(name, #found,
      table.concat(ps, ", ")))
  end
  return found[1]
end

-- ctx:named(args) -> the stack args[1] names (and no other argument), or nil, exit code after
-- the error line (no NAME or a second argument: a usage error, 2).
function Ctx:named(args)
  if not args[1] then return nil, self:usage(self.name .. " needs a NAME (a session key or a project)") end
  if args[2] then return nil, self:usage(self.name .. " takes one NAME, got also " .. args[2]) end
  return self:stack(args[1])
end

function M.context(out, err)
  return setmetatable({ out = out, err = err }, Ctx)
end

return M
