-- The benches' one writer of docs/results/: a run's printed output becomes a page (or a marked
-- section of a shared page) that says when, where and under what load it was measured, so the
-- docs hold the last run of each bench and nothing older, and docs/ keeps to its budget.
--
--   package.path = "./bench/?.lua;" .. package.path
--   local run = require("results").begin("fileplane", { title = "# Results: ...", argv = arg })
--   print(...)                     -- everything printed from here on is the run's table
--   run:finish { engine = "20.10.24 (API 1.41)" }   -- load after, then the page is replaced
--
-- A page with a section (opts.section = "stack_bench") keeps everything outside the lines
--   <!-- results: stack_bench -->  ...  <!-- /results: stack_bench -->
-- and replaces what is between them; a page without them gets them appended. A run that fails
-- before finish writes nothing: the page keeps the last run that completed.
-- SANDSTACK_BENCH_RESULTS=0 prints as always and writes nothing; SANDSTACK_RESULTS_DIR moves
-- the pages elsewhere (the unit spec writes to a temporary directory).
local M = {}

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function first_line(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  if not p then return nil end
  local s = p:read("*l")
  p:close()
  if s and s ~= "" then return s end
end

-- "1.52 1.10 0.98": the first three fields of /proc/loadavg.
function M.loadavg(text)
  text = text or read("/proc/loadavg") or ""
  return text:match("^(%S+ %S+ %S+)") or "unknown"
end

-- "2 CPUs, 7.8 GiB": the processors this process may use (nproc) and MemTotal.
function M.machine(cpus, meminfo)
  cpus = cpus or tonumber(first_line("nproc") or "") or "?"
  meminfo = meminfo or read("/proc/meminfo") or ""
  local kb = tonumber(meminfo:match("MemTotal:%s*(%d+)") or "")
  return ("%s CPUs, %s"):format(cpus, kb and ("%.1f GiB"):format(kb / 1048576) or "memory unknown")
end

-- The commit the bench ran from, "-dirty" when the tree differs from it.
function M.commit()
  local c = first_line("git rev-parse --short HEAD")
  if not c then return "unknown" end
  local clean = os.execute("git diff --quiet HEAD 2>/dev/null")
  if clean ~= true and clean ~= 0 then c = c .. "-dirty" end
  return c
end

-- The engine the benches talk to, when the bench does not say: `docker version`, a read.
function M.engine()
  local v = first_line("docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})'")
  return v and ("Docker " .. v) or "unknown"
end

-- The command line from Lua's arg table: "lua5.4 bench/x.lua 3".
function M.command(argv)
  argv = argv or arg or {}
  local words = {}
  for i = -1, #argv do
    local w = argv[i]
    if w ~= nil then
      words[#words + 1] = w:match("^[%w%./_=:,+-]+$") and w or ("'" .. w:gsub("'", "'\\''") .. "'")
    end
  end
  return table.concat(words, " ")
end

-- The text a run leaves: the facts line, then the printed output (fenced unless it is markdown).
function M.render(meta, output, markdown)
  local out = {}
  if meta.title then out[#out + 1] = meta.title .. "\n" end
  if meta.intro then out[#out + 1] = meta.intro .. "\n" end
  out[#out + 1] = ("Written by `%s` on %s, commit %s; %s; %s; load average %s before, %s after.\n"):format(
    meta.command, meta.date, meta.commit, meta.machine, meta.engine, meta.load_before, meta.load_after)
  output = output:gsub("^\n+", ""):gsub("%s+$", "")
  if markdown then
    out[#out + 1] = output .. "\n"
  else
    out[#out + 1] = "```\n" .. output .. "\n```\n"
  end
  return table.concat(out, "\n")
end

local function plain(s) return (s:gsub("[%-%.%+%*%?%[%]%^%$%(%)%%]", "%%%0")) end

-- The page with section `name` replaced by body (appended, with its markers, when absent).
function M.replace_section(page, name, body)
  local open, close = "<!-- results: " .. name .. " -->", "<!-- /results: " .. name .. " -->"
  local block = open .. "\n" .. body:gsub("\n+$", "") .. "\n" .. close
  local a, b = page:find(plain(open) .. ".-" .. plain(close))
  if a then return page:sub(1, a - 1) .. block .. page:sub(b + 1) end
  return page:gsub("\n*$", "") .. "\n\n" .. block .. "\n"
end

local Run = {}
Run.__index = Run

-- Starts a run of the bench that owns page `name` (docs/results/<name>.md): notes the load, and
-- from now on keeps everything the bench prints (print and io.write) as well as printing it.
-- opts: title (the page's first line, "# ..." or "## ..."), intro, section, markdown, argv or
-- command, load_before (when taken earlier, by a shell bench), dir; stdout (a function(s) that
-- prints, default io.stdout:write; the shell benches' helper prints nothing twice).
function M.begin(name, opts)
  opts = opts or {}
  local self = setmetatable({ name = name, opts = opts, chunks = {},
    date = os.date("!%Y-%m-%d %H:%M UTC"), load_before = opts.load_before or M.loadavg(),
    command = opts.command or M.command(opts.argv) }, Run)
  local out = opts.stdout or function(s) io.stdout:write(s) end
  self.restore = { print = print, write = io.write }
  _G.print = function(...)
    local t = {}
    for i = 1, select("#", ...) do t[i] = tostring((select(i, ...))) end
    self:emit(table.concat(t, "\t") .. "\n", out)
  end
  io.write = function(...)
    for i = 1, select("#", ...) do self:emit(tostring((select(i, ...))), out) end
    return io.stdout
  end
  return self
end

function Run:emit(s, out)
  self.chunks[#self.chunks + 1] = s
  out(s)
end

-- What the run printed since begin.
function Run:output() return table.concat(self.chunks) end

-- Ends the run: stops keeping the output, and replaces the page or its section. Returns the
-- path written (nil when SANDSTACK_BENCH_RESULTS=0).
-- facts: engine (e.g. "Docker 20.10.24 (API 1.41)", asked of `docker version` otherwise).
function Run:finish(facts)
  facts = facts or {}
  _G.print, io.write = self.restore.print, self.restore.write
  if os.getenv("SANDSTACK_BENCH_RESULTS") == "0" then return nil end
  local o = self.opts
  local meta = { title = o.title, intro = o.intro, command = self.command, date = self.date,
    commit = facts.commit or M.commit(), machine = facts.machine or M.machine(),
    engine = facts.engine or M.engine(), load_before = self.load_before,
    load_after = facts.load_after or M.loadavg() }
  local text = M.render(meta, self:output(), o.markdown)
  local dir = o.dir or os.getenv("SANDSTACK_RESULTS_DIR") or "docs/results"
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  local path = dir .. "/" .. self.name .. ".md"
  if o.section then text = M.replace_section(read(path) or "", o.section, text) end
  local f = assert(io.open(path .. ".tmp", "wb"))
  f:write(text)
  assert(f:close())
  assert(os.rename(path .. ".tmp", path))
  return path
end

return M
