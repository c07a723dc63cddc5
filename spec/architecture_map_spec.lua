-- docs/architecture.md is the map of the code: it names every Lua module under lua/sandstack/
-- by its require name, and every C floor (each directory directly under csrc/), each in
-- backquotes. Modules are split and added all the time, so this spec reads both lists from the
-- tree and fails with the exact lines to add; and with the lines whose module or floor is gone.
-- A floor's own subdirectories (csrc/proxy/tls, csrc/fuzz/corpus/...) are its layout, not
-- floors. No engine.
local h = require "helpers"

local DOC = "docs/architecture.md"

local function lines_of(cmd)
  local out = {}
  local p = assert(io.popen(cmd))
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  table.sort(out)
  return out
end

-- lua/sandstack/docker/pool.lua -> sandstack.docker.pool; lua/sandstack/init.lua and
-- lua/sandstack.lua -> sandstack (what `require` finds through lua/?.lua and lua/?/init.lua).
local function module_name(path)
  local rel = assert(path:match("^lua/(.+)%.lua$"), "not a module path: " .. path)
  rel = rel:gsub("/init$", "")
  return (rel:gsub("/", "."))
end

-- { {name =, source =}, ... } of the modules under lua/sandstack, sorted by name.
local function modules()
  local out = {}
  for _, path in ipairs(lines_of("find lua/sandstack lua/sandstack.lua -name '*.lua' -type f 2>/dev/null")) do
    out[#out + 1] = { name = module_name(path), source = path }
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- { {name = "csrc/engine", source = "csrc/engine/"}, ... }: the directories directly under csrc/.
local function floors()
  local out = {}
  for _, dir in ipairs(lines_of("find csrc -mindepth 1 -maxdepth 1 -type d")) do
    out[#out + 1] = { name = dir, source = dir .. "/" }
  end
  return out
end

-- The names a list item of text holds before its colon, each in backquotes: the doc's entries
-- ("- `sandstack.docker.pool`: ...", "- `csrc/engine`: ...", "- `a`, `b`: ..."), in order.
local function entries(text)
  local out = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local head = line:match("^%s*[-*]%s+(`[^:]*)")
    for name in (head or ""):gmatch("`([^`]+)`") do out[#out + 1] = name end
  end
  return out
end

-- The entries of `want` that text has no line for. A name counts whole, as an entry: a longer
-- name (`sandstack.docker.pool`, `csrc/proxy/tls`) does not stand for a shorter one, nor a
-- mention in prose for a line of its own.
local function missing(text, want)
  local listed, out = {}, {}
  for _, name in ipairs(entries(text)) do listed[name] = true end
  for _, e in ipairs(want) do
    if not listed[e.name] then out[#out + 1] = e end
  end
  return out
end

-- The doc's entries shaped as a module or floor name that are not in `have`: lines left behind
-- by a module removed, renamed or merged.
local function stale(text, have)
  local known, out = {}, {}
  for _, e in ipairs(have) do known[e.name] = true end
  for _, name in ipairs(entries(text)) do
    if (name == "sandstack" or name:match("^sandstack%.[%w_.]+$") or name:match("^csrc/[%w_.-]+$"))
      and not known[name] then
      out[#out + 1] = name
    end
  end
  return out
end

-- The heading each listed name sits under: { [name] = heading text }.
local function sections(text)
  local out, heading = {}, nil
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    heading = line:match("^#+%s+(.-)%s*$") or heading
    local head = line:match("^%s*[-*]%s+(`[^:]*)")
    for name in (head or ""):gmatch("`([^`]+)`") do out[name] = out[name] or heading end
  end
  return out
end

-- Where a missing name's line goes: under the heading most names of its family already sit
-- under (csrc/* for a floor, sandstack.docker.* for sandstack.docker.x), beside the first of
-- them; a family with no name listed yet needs a section.
local function place(name, where)
  local family = name:match("^csrc/") and "csrc/" or name:match("^(sandstack%.[%w_.]+%.)[%w_]+$")
  if not family then return 'under "Public modules" if users require it, else "Shared"' end
  local count, first = {}, {}
  for listed, heading in pairs(where) do
    if listed:sub(1, #family) == family then
      count[heading] = (count[heading] or 0) + 1
      if not first[heading] or listed < first[heading] then first[heading] = listed end
    end
  end
  local best
  for heading, n in pairs(count) do
    if not best or n > count[best] or (n == count[best] and heading < best) then best = heading end
  end
  if not best then return 'a new family: a section of its own under "Internal families"' end
  return ('under "%s", beside `%s`'):format(best, first[best])
end

-- The failure message: each name as the line to paste, with where it comes from and where it goes.
local function advice(absent, gone, text)
  local msg, where = {}, sections(text)
  if #absent > 0 then
    msg[#msg + 1] = ("%s does not name %d of the tree's modules and floors; add one line each:"):format(DOC, #absent)
    for _, e in ipairs(absent) do
      msg[#msg + 1] = ("  - `%s`: WHAT IT HOLDS    (%s; %s)"):format(e.name, e.source, place(e.name, where))
    end
  end
  if #gone > 0 then
    msg[#msg + 1] = ("%s lists %d name(s) the tree no longer has (removed, renamed or merged); drop or rename their lines:")
      :format(DOC, #gone)
    for _, name in ipairs(gone) do msg[#msg + 1] = "  `" .. name .. "`" end
  end
  return table.concat(msg, "\n")
end

local function check(text, mods, dirs)
  local want = {}
  for _, e in ipairs(mods) do want[#want + 1] = e end
  for _, e in ipairs(dirs) do want[#want + 1] = e end
  return missing(text, want), stale(text, want)
end

describe("docs/architecture.md, the map of the code", function()
  local text = assert(h.read_file(DOC))
  local mods, dirs = modules(), floors()

  it("finds the tree's modules and floors", function()
    assert.is_true(#mods >= 100, "only " .. #mods .. " modules under lua/sandstack")
    assert.is_true(#dirs >= 10, "only " .. #dirs .. " directories under csrc")
  end)

  it("names every module under lua/sandstack and every directory under csrc, and nothing gone", function()
    local absent, gone = check(text, mods, dirs)
    assert(#absent == 0 and #gone == 0, "\n" .. advice(absent, gone, text))
  end)

  describe("the check itself", function()
    local fake_mods = {
      { name = "sandstack", source = "lua/sandstack/init.lua" },
      { name = "sandstack.docker", source = "lua/sandstack/docker.lua" },
      { name = "sandstack.docker.pool", source = "lua/sandstack/docker/pool.lua" },
      { name = "sandstack.docker.pool_claim", source = "lua/sandstack/docker/pool_claim.lua" },
    }
    local fake_dirs = {
      { name = "csrc/proxy", source = "csrc/proxy/" },
      { name = "csrc/engine", source = "csrc/engine/" },
    }

    it("derives the require name from the path", function()
      assert.equal("sandstack", module_name("lua/sandstack/init.lua"))
      assert.equal("sandstack", module_name("lua/sandstack.lua"))
      assert.equal("sandstack.docker", module_name("lua/sandstack/docker.lua"))
      assert.equal("sandstack.docker.pool", module_name("lua/sandstack/docker/pool.lua"))
      assert.equal("sandstack.gateway.console_ws", module_name("lua/sandstack/gateway/console_ws.lua"))
    end)

    it("catches a doc without one module, naming it, the line to add and where", function()
      local doc = table.concat({
        "## The C floors",
        "- `csrc/proxy`: the proxy (`parse/`, `tls/`).",
        "- `csrc/engine`: the client.",
        "## Public modules",
        "- `sandstack`: the entry.",
        "- `sandstack.docker`: stacks.",
        "### `sandstack.docker.*`",
        "- `sandstack.docker.pool`: warm pools.",
      }, "\n")
      local absent, gone = check(doc, fake_mods, fake_dirs)
      assert.equal(1, #absent)
      assert.equal("sandstack.docker.pool_claim", absent[1].name)
      assert.same({}, gone)
      assert.equal("  - `sandstack.docker.pool_claim`: WHAT IT HOLDS    (lua/sandstack/docker/pool_claim.lua; "
        .. "under \"`sandstack.docker.*`\", beside `sandstack.docker.pool`)", advice(absent, gone, doc):match("\n(.*)$"))
      assert.truthy(advice(absent, gone, doc):find("does not name 1 ", 1, true))
    end)

    it("does not count a longer name for a shorter one", function()
      local doc = "## The C floors\n- `csrc/proxy/tls`: TLS.\n- `csrc/engines`: not the client.\n"
        .. "- `sandstack.docker.pool`: pools.\n- `sandstack.docker.pool_claim`: claims.\n"
      local absent = check(doc, fake_mods, fake_dirs)
      local names = {}
      for _, e in ipairs(absent) do names[#names + 1] = e.name end
      assert.same({ "sandstack", "sandstack.docker", "csrc/proxy", "csrc/engine" }, names)
      local msg = advice(absent, {}, doc)
      assert.truthy(msg:find("- `csrc/engine`: WHAT IT HOLDS    (csrc/engine/; under \"The C floors\"", 1, true), msg)
      assert.truthy(msg:find("- `sandstack`: WHAT IT HOLDS    (lua/sandstack/init.lua; under \"Public modules\"", 1, true), msg)
    end)

    it("places a missing module where most of its family is listed", function()
      local doc = "## Public modules\n- `sandstack.docker.cosocket`: spawn in nginx.\n"
        .. "### `sandstack.docker.*`\n- `sandstack.docker.start`: the start.\n- `sandstack.docker.pool`: pools.\n"
      assert.equal('under "`sandstack.docker.*`", beside `sandstack.docker.pool`',
        place("sandstack.docker.pool_claim", sections(doc)))
    end)

    it("does not count a name mentioned only in prose", function()
      local doc = "- `sandstack`: the entry; `sandstack.docker` loads on first use.\n"
        .. "**Start.** `sandstack.docker.pool` and `csrc/engine` do things.\n"
      local names = {}
      for _, e in ipairs(check(doc, fake_mods, fake_dirs)) do names[#names + 1] = e.name end
      assert.same({ "sandstack.docker", "sandstack.docker.pool", "sandstack.docker.pool_claim", "csrc/proxy",
        "csrc/engine" }, names)
    end)

    it("says a module of a new family needs a section of its own", function()
      local new = { { name = "sandstack.vm.boot", source = "lua/sandstack/vm/boot.lua" } }
      local absent = check("- `sandstack.docker.pool`: pools.\n", new, {})
      assert.truthy(advice(absent, {}, ""):find("a new family", 1, true))
    end)

    it("catches a line whose module or floor is gone", function()
      local doc = table.concat({
        "- `sandstack`: the entry, `sandstack.docker.start` in prose is no entry.",
        "- `sandstack.docker`: stacks.",
        "- `sandstack.docker.pool`: warm pools.",
        "- `sandstack.docker.pool_claim`: claims.",
        "- `sandstack.docker.pool_old`, `sandstack.docker.pool`: both listed on one line.",
        "- `csrc/proxy`: the proxy.",
        "- `csrc/engine`: the client.",
        "- `csrc/gone`: a floor no more.",
        "**Start.** `sandstack.docker.start` runs the steps.",
      }, "\n")
      local absent, gone = check(doc, fake_mods, fake_dirs)
      assert.same({}, absent)
      assert.same({ "sandstack.docker.pool_old", "csrc/gone" }, gone)
      local msg = advice(absent, gone, doc)
      assert.truthy(msg:find("lists 2 name(s) the tree no longer has", 1, true), msg)
      assert.truthy(msg:find("`csrc/gone`", 1, true), msg)
    end)
  end)
end)
