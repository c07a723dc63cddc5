-- The documentation's examples as tests: every ```lua block of README.md and docs/**/*.md runs
-- against the real engine, and every ```sh or ```console block's `sandstack ...` lines run as
-- commands. A block that cannot run on this machine carries, on the line before its fence,
--   <!-- doctest: skip, REASON -->
-- and is still compiled, with every sandstack.* name it uses looked up in the loaded module.
-- After a block ran, nothing labelled with a project named in it may be left on the engine.
local M = {}

M.LABEL = "io.sandstack.project"

-- The markdown files holding examples: README.md and every .md under docs/ and design/, sorted.
function M.files(top)
  local list = { "README.md" }
  local p = assert(io.popen("cd '" .. top .. "' && find docs design -name '*.md' | sort"))
  for f in p:lines() do list[#list + 1] = f end
  p:close()
  return list
end

local RUN_LANGS = { lua = true, sh = true, console = true }

-- The fenced blocks of one markdown text: { {file, line, lang, code, skip = reason|nil}, ... }.
-- A fence may be indented (inside a list item); its lines lose that indentation.
function M.blocks(file, text)
  local out, lines = {}, {}
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local i = 1
  while i <= #lines do
    local indent, lang = lines[i]:match("^(%s*)```(%w*)%s*$")
    if indent then
      local start, body = i, {}
      i = i + 1
      while i <= #lines and not lines[i]:match("^%s*```%s*$") do
        body[#body + 1] = lines[i]:sub(1, #indent) == indent and lines[i]:sub(#indent + 1) or lines[i]
        i = i + 1
      end
      if RUN_LANGS[lang] then
        local j, skip = start - 1, nil
        while j > 0 and lines[j]:match("^%s*$") do j = j - 1 end
        if j > 0 then
          local marker = lines[j]:match("^%s*<!%-%-%s*doctest:%s*(.-)%s*%-%->%s*$")
          if marker then
            local sep, rest = marker:match("^skip%s*([,:(])%s*(.-)%s*$")
            skip = sep == "(" and rest:gsub("%)$", "") or rest
            if not skip or skip == "" then error(file .. ":" .. j .. ": a doctest marker is 'skip, REASON'") end
          end
        end
        out[#out + 1] = { file = file, line = start, lang = lang, code = table.concat(body, "\n"), skip = skip }
      end
    end
    i = i + 1
  end
  return out
end

-- Every sandstack.a.b name a Lua block uses (also through `local x = require("sandstack").a`).
function M.names(code)
  local seen, out = {}, {}
  local function add(n)
    if not seen[n] then seen[n] = true; out[#out + 1] = n end
  end
  -- the code without its string literals and comments (a label "io.sandstack.project" or a
  -- module name "sandstack.gateway.worker" is no use of the module's fields)
  local bare = code:gsub('"[^"\n]*"', '""'):gsub("'[^'\n]*'", "''"):gsub("%-%-[^\n]*", "")
  for n in bare:gmatch("%f[%w_%.]sandstack%.([%a_][%w_%.]*)") do add(n) end
  for n in code:gmatch("require%s*%(?%s*[\"']sandstack[\"']%s*%)?%s*%.([%a_][%w_%.]*)") do add(n) end
  return out
end

-- The names of M.names(code) the module lacks: { "docker.nope", ... }.
function M.missing(code, sandstack)
  local missing = {}
  for _, n in ipairs(M.names(code)) do
    local v = sandstack
    for part in n:gmatch("[^%.]+") do
      if type(v) ~= "table" then v = nil; break end
      v = v[part]
      if v == nil then break end
    end
    if v == nil then missing[#missing + 1] = n end
  end
  return missing
end

-- The `sandstack ...` command lines of a shell block ("$ " prompts dropped).
function M.commands(code)
  local out = {}
  for l in (code .. "\n"):gmatch("([^\n]*)\n") do
    l = l:gsub("^%s*%$%s+", ""):gsub("^%s+", "")
    if l:match("^sandstack%s") or l == "sandstack" then out[#out + 1] = l end
  end
  return out
end

-- Runs a shell command: its output (stdout and stderr) and exit code. The code is printed by the
-- shell itself, since LuaJIT's popen close does not give it.
local function shell(cmd)
  local p = assert(io.popen("{ " .. cmd .. "\n} 2>&1; echo \"doctest-exit:$?\""))
  local text = p:read("*a")
  p:close()
  local out, code = text:match("^(.-)doctest%-exit:(%d+)%s*$")
  return out or text, tonumber(code) or -1
end

-- Compiles a block: a Lua chunk, or `bash -n` for a shell block. Returns true or nil, why.
function M.compile(block)
  if block.lang == "lua" then
    local f, err = load(block.code, "=" .. block.file .. ":" .. block.line, "t", {})
    if not f then return nil, err end
    return true
  end
  local tmp = os.tmpname()
  local fh = assert(io.open(tmp, "w"))
  fh:write(block.code, "\n")
  fh:close()
  local out, code = shell("bash -n " .. tmp)
  os.remove(tmp)
  if code ~= 0 then return nil, out end
  return true
end

-- The string literals of a block that could name a project (a session key, a pool's name).
function M.literals(code)
  local seen, out = {}, {}
  for _, q in ipairs { '"([%w][%w_.%-]*)"', "'([%w][%w_.%-]*)'" } do
    for s in code:gmatch(q) do
      if not seen[s] then seen[s] = true; out[#out + 1] = s end
    end
  end
  return out
end

-- Whether a project is one a block with these literals made: the literal itself, the default
-- project of that session key ("sandstack-" .. key), a warm pool's stack (name-<hex>), or a key
-- of a literal ending in "-" and random hex. The
-- engine is shared, so nothing looser: another process's stacks must never match.
local function made_by(project, names)
  for _, n in ipairs(names) do
    if n == "sandstack" or n == "sandstack-" then goto next end
    if project == n or project == "sandstack-" .. n then return true end
    if project:sub(1, #n + 1) == n .. "-" and project:sub(#n + 2):match("^%x+$") then return true end
    -- a key made of a literal prefix and random hex: "docs-session-" .. random_hex(3)
    if n:sub(-1) == "-" then
      for _, p in ipairs { n, "sandstack-" .. n } do
        if project:sub(1, #p) == p and project:sub(#p + 1):match("^%x+$") then return true end
      end
    end
    ::next::
  end
  return false
end

M.made_by = made_by

-- The labelled objects on the engine, by "kind name": { ["container /x"] = project, ... }.
function M.labelled(eng)
  local out = {}
  local lists = {
    { "container", "/containers/json", function(o) return (o.Names or {})[1] end, true },
    { "network", "/networks", function(o) return o.Name end },
    { "volume", "/volumes", function(o) return o.Name end },
  }
  for _, l in ipairs(lists) do
    local body = assert(eng:call("GET", l[2], nil, { query = { all = l[4] or nil, filters = { label = { M.LABEL } } } }))
    if l[1] == "volume" then body = body.Volumes or {} end
    for _, o in ipairs(body) do
      local project = o.Labels and o.Labels[M.LABEL]
      if project then out[l[1] .. " " .. tostring(l[3](o))] = project end
    end
  end
  return out
end

-- What a block left: the labelled objects not there before it ran (`before`, from M.labelled;
-- nil: none were) whose project the block made (made_by its literals). Returns
-- { "container NAME (project P)", ... } and the set of those projects.
function M.leftovers(eng, code, before)
  local names = M.literals(code)
  local left, projects = {}, {}
  local now = M.labelled(eng)
  local keys = {}
  for k in pairs(now) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local project = now[k]
    if not (before and before[k]) and made_by(project, names) then
      left[#left + 1] = ("%s (project %s)"):format(k, project)
      projects[project] = true
    end
  end
  return left, projects
end

-- Runs a Lua block in its own environment (globals read through to _G, print captured).
-- Returns true, output or nil, error, output.
function M.run_lua(block)
  local out = {}
  local env = setmetatable({
    print = function(...)
      local t = table.pack(...)
      for i = 1, t.n do t[i] = tostring(t[i]) end
      out[#out + 1] = table.concat(t, "\t")
    end,
  }, { __index = _G })
  local f, err = load(block.code, "=" .. block.file .. ":" .. block.line, "t", env)
  if not f then return nil, err, "" end
  local ok, e = xpcall(f, debug.traceback)
  if not ok then return nil, tostring(e), table.concat(out, "\n") end
  return true, table.concat(out, "\n")
end

-- Runs a shell block's `sandstack` lines with the checkout's bin/sandstack, each one on its own,
-- stopping at the first that fails. Returns true, output or nil, why, output.
function M.run_sh(block, top)
  local out = {}
  for _, cmd in ipairs(M.commands(block.code)) do
    local text, code = shell("cd '" .. top .. "' && PATH='" .. top .. "/bin':\"$PATH\" " .. cmd)
    out[#out + 1] = "$ " .. cmd .. "\n" .. text
    if code ~= 0 then return nil, ("`%s` exited %d"):format(cmd, code), table.concat(out, "\n") end
  end
  return true, table.concat(out, "\n")
end

-- One block, as the spec checks it: compiled; its sandstack.* names exist; unless skipped, run,
-- then nothing of its projects is left. Returns "ran", "skipped" (marked) or "no_command" (a shell
-- block that runs no `sandstack`), or nil, why.
function M.check(block, ctx)
  local ok, err = M.compile(block)
  if not ok then return nil, "does not compile: " .. tostring(err) end
  if block.lang == "lua" then
    local missing = M.missing(block.code, ctx.sandstack)
    if #missing > 0 then return nil, "names what sandstack lacks: sandstack." .. table.concat(missing, ", sandstack.") end
  end
  if block.skip then return "skipped" end
  if block.lang ~= "lua" and #M.commands(block.code) == 0 then return "no_command" end
  local before = ctx.engine and M.labelled(ctx.engine)
  local out
  if block.lang == "lua" then
    ok, err, out = M.run_lua(block)
  else
    ok, err, out = M.run_sh(block, ctx.top)
  end
  if ctx.engine then
    local left, projects = M.leftovers(ctx.engine, block.code, before)
    if #left > 0 then
      local why = "left behind: " .. table.concat(left, ", ")
      if ctx.cleanup then ctx.cleanup(projects) end
      return nil, (ok and "" or tostring(err) .. "; ") .. why
    end
  end
  if not ok then return nil, tostring(err) .. (out ~= "" and ("\noutput:\n" .. out) or "") end
  return "ran"
end

return M
