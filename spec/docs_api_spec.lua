-- The reference (docs/api/*.md, and any page of docs/ with a marker) is held to the code both ways: every option name a validator
-- accepts is documented, and every documented name is accepted; and a table whose validator
-- describes its options (sandstack.error's `described`, the start options' rows in C) is, row
-- for row, what scripts/api_tables.lua writes from that description now. The names are read
-- from the validators themselves, never from a copy (spec/support/api_sections.lua reaches each).
--
-- A documented options table is the markdown table right after a marker line
-- `<!-- api: ID -->` (spec/support/api_tables.lua reads them).
-- To document a new function or method: write its section with the marker and the table, and
-- add one line to SECTIONS in spec/support/api_sections.lua saying how to reach its options
-- check. The spec fails for a marker without a line there, and for a line there without a marker.
local SECTIONS = require "api_sections"
local generator = dofile("scripts/api_tables.lua")
local sandstack = require "sandstack"
local E = require "sandstack.error"
local h = require "helpers"

local function sorted_keys(set)
  local keys = {}
  for k in pairs(set) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function read(path) return assert(h.read_file(path)) end

-- { id = { file =, line =, keys = {sorted}, rows = ... } } from the markers (spec/support/api_tables.lua).
local documented = require("api_tables").read

local function diff(a, b)
  local set, out = {}, {}
  for _, k in ipairs(b) do set[k] = true end
  for _, k in ipairs(a) do
    if not set[k] then out[#out + 1] = k end
  end
  return out
end

describe("the reference in docs/api", function()
  local docs = documented()

  it("has a section for every options check the spec knows, and no other", function()
    local missing, unknown = {}, {}
    for id in pairs(SECTIONS) do
      if not docs[id] then missing[#missing + 1] = id end
    end
    for id, d in pairs(docs) do
      if not SECTIONS[id] then unknown[#unknown + 1] = ("%s (%s:%d)"):format(id, d.file, d.line) end
    end
    table.sort(missing)
    table.sort(unknown)
    assert(#missing == 0, "sections the reference lacks (add <!-- api: ID --> and its table): " ..
      table.concat(missing, ", "))
    assert(#unknown == 0, "markers the spec cannot check (add a line to SECTIONS): " .. table.concat(unknown, ", "))
  end)

  local ids = {}
  for id in pairs(SECTIONS) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    it("documents exactly the options " .. id .. " accepts", function()
      local d = docs[id]
      assert(d, "no section " .. id)
      local code = sorted_keys(SECTIONS[id]())
      local undocumented, unaccepted = diff(code, d.keys), diff(d.keys, code)
      assert(#undocumented == 0, ("%s:%d: accepted by the code, not documented: %s"):format(d.file, d.line,
        table.concat(undocumented, ", ")))
      assert(#unaccepted == 0, ("%s:%d: documented, not accepted by the code: %s"):format(d.file, d.line,
        table.concat(unaccepted, ", ")))
    end)
  end

  it("names only functions the module has", function()
    local p = assert(io.popen("ls docs/api/*.md"))
    local bad = {}
    for file in p:lines() do
      for name in read(file):gmatch("\n#+ `sandstack%.([%w_%.]+)") do
        local v = sandstack
        for part in name:gmatch("[^%.]+") do v = type(v) == "table" and v[part] or nil end
        if v == nil then bad[#bad + 1] = file .. ": sandstack." .. name end
      end
    end
    p:close()
    assert(#bad == 0, "no such function: " .. table.concat(bad, ", "))
  end)

  it("holds every described table as scripts/api_tables.lua writes it now", function()
    local pages, problems = generator.pages(SECTIONS)
    assert(#problems == 0, table.concat(problems, "\n"))
    local differ, generated = {}, 0
    for _, page in ipairs(pages) do
      generated = generated + #page.ids
      if page.want ~= page.text then
        local have, want = {}, {}
        for l in page.text:gmatch("([^\n]*)\n") do have[#have + 1] = l end
        for l in page.want:gmatch("([^\n]*)\n") do want[#want + 1] = l end
        for i = 1, math.max(#have, #want) do
          if have[i] ~= want[i] then
            differ[#differ + 1] = ("%s:%d: the docs have %q, the validator describes %q"):format(page.file, i,
              have[i] or "", want[i] or "")
            break
          end
        end
      end
    end
    assert(#differ == 0, "options tables that differ from their validators (run lua5.4 scripts/api_tables.lua):\n"
      .. table.concat(differ, "\n"))
    assert(generated >= 1, "no table is generated")
  end)

  -- A described row's type cell names the Lua type its check takes (its prose may say more:
  -- "seconds", "string, `\"once\"` or `\"session\"`").
  local TYPE_WORDS = { number = { "number", "integer", "seconds", "bytes", "count", "whole" }, string = { "string" },
    boolean = { "boolean" }, table = { "table", "list", "set" }, ["function"] = { "function" } }
  local function type_drift(spec)
    local bad = {}
    for name, e in pairs(spec) do
      if type(e) == "table" and e.refused and type(e[1]) == "string" then
        for t in e[1]:gmatch("[^|]+") do
          local named = false
          for _, w in ipairs(TYPE_WORDS[t] or { t }) do named = named or (e.type or ""):find(w, 1, true) ~= nil end
          if not named then bad[#bad + 1] = ("%s (checked as %s, documented as %q)"):format(name, t, e.type or "") end
        end
      end
    end
    table.sort(bad)
    return bad
  end

  it("documents, in every described row, the type its check takes", function()
    local bad = {}
    for _, id in ipairs(ids) do
      for _, b in ipairs(type_drift(SECTIONS[id]())) do bad[#bad + 1] = id .. ": " .. b end
    end
    assert(#bad == 0, "type cells that do not name the checked type:\n" .. table.concat(bad, "\n"))
    assert.same({ "mode (checked as number, documented as \"text\")" },
      type_drift(E.described { { "mode", "number", type = "text", default = "", refused = "x" } }))
  end)

  it("documents the gateway's defaults as its DEFAULTS are, and every key DEFAULTS has", function()
    local config = require "sandstack.gateway.config"
    local bad = {}
    for k, v in pairs(config.DEFAULTS) do
      local row = config.KEYS[k]
      if not row then
        bad[#bad + 1] = k .. ": a default, but no row"
      elseif type(v) ~= "table" and not row.default:find("`" .. (type(v) == "string" and ("%q"):format(v) or tostring(v)) .. "`", 1, true) then
        bad[#bad + 1] = ("%s: the default is %s, the row says %q"):format(k, tostring(v), row.default)
      end
    end
    table.sort(bad)
    assert(#bad == 0, "gateway config rows that differ from DEFAULTS:\n" .. table.concat(bad, "\n"))
    local q = config.KEYS.snapshot_quota.default
    assert.matches("count = " .. config.QUOTA.count, q, 1, true)
    assert.matches("bytes = " .. math.floor(config.QUOTA.bytes / 1073741824) .. " GiB", q, 1, true)
  end)

  it("documents h:exec's and the pools' defaults as the code has them", function()
    local exec, O = require "sandstack.docker.handle_exec", require "sandstack.docker.method_options"
    assert.equal(tostring(exec.DEFAULT_TIMEOUT), O.exec.timeout.default)
    assert.equal(("%d MiB"):format(exec.DEFAULT_MAX_BYTES / 1048576), O.exec.max_bytes.default)
    local stack = { agent_port = 8080, image = "x" }
    local docker = assert(sandstack.docker.pool { name = "docs-probe", stack = stack })
    local swarm = assert(sandstack.swarm.pool { name = "docs-probe", stack = stack })
    local row = require("sandstack.pool_kit").POOL_KEYS
    assert.equal(("`%d` (swarm: `%d`)"):format(docker.concurrency, swarm.concurrency), row.concurrency.default)
    assert.equal(("`%d`"):format(docker.size), row.size.default)
  end)

  it("fails for a described table the docs hold otherwise, and names its first line that differs", function()
    local spec = E.described {
      { "timeout", E.SECONDS0, type = "seconds", default = "`5`", refused = "below 0" },
      { { "a", "b" }, "string", type = "string", default = "", refused = "not a string" },
    }
    assert.same({ "| `timeout` | seconds | `5` | below 0 |", "| `a`, `b` | string | | not a string |" },
      generator.render(spec))
    -- a page holding an older row: the generator's text differs on that row, and only there
    local file = h.must("mktemp /tmp/sstest-apitables.XXXXXX"):gsub("%s+$", "")
    local page = "<!-- api: t -->\n| option | type | default | refused when |\n|---|---|---|---|\n"
      .. "| `timeout` | whole seconds | `5` | below 0 |\n\nprose\n"
    h.write_file(file, page)
    local pages, problems = generator.pages({ t = function() return spec end }, { file })
    os.remove(file)
    assert.same({}, problems)
    assert.same({ "t" }, pages[1].ids)
    assert.equal(page:gsub("| `timeout` | whole seconds | `5` | below 0 |", table.concat(generator.render(spec), "\n"), 1),
      pages[1].want)
    assert.are_not.equal(pages[1].text, pages[1].want)
    -- a spec partly described is a problem, not a table
    local partly = E.described { { "a", "string", type = "string", default = "", refused = "x" } }
    partly.b = "string"
    assert.matches("no description for b", select(2, generator.render(partly)), 1, true)
  end)

  it("fails for an option the code accepts but the reference lacks", function()
    -- the comparison itself, on a deliberately short documented list
    assert.same({ "timeout" }, diff({ "docker_host", "timeout" }, { "docker_host" }))
  end)
end)
