-- No require cycle among the `sandstack` Lua modules. spec/support/module_graph.lua reads every
-- file under lua/sandstack/ (and lua/sandstack.lua if there is one) as Lua tokens, without loading
-- it, and takes each require of a `sandstack` module by a literal name: `require "m"`,
-- `require 'm'`, `require("m")`, `pcall(require, "m")`, at the top of the file or inside a
-- function alike (a require deferred into a function still makes the two modules depend on each
-- other; it only hides the cycle from the loader). A name maps to its file as package.path
-- finds it (sandstack.a.b: lua/sandstack/a/b.lua, else lua/sandstack/a/b/init.lua); sandstack.core,
-- the C core, has no file and no edges. The spec fails naming each cycle, its modules in require
-- order. A cycle is broken by having the module that owns a concept required by the others, never
-- the reverse: a piece both need moves down into a module of its own, and a callback is handed
-- to its owner as a function rather than the owner requiring its caller.
local G = require "module_graph"

describe("the sandstack module graph", function()
  it("has no require cycle", function()
    local graph = G.graph("lua")
    assert.truthy(graph["sandstack"], "the scan found lua/sandstack/init.lua")
    assert.truthy(graph["sandstack.docker.handle"], "the scan found lua/sandstack/docker/handle.lua")
    local lines = {}
    for _, cycle in ipairs(G.cycles(graph)) do lines[#lines + 1] = G.describe(cycle) end
    assert(#lines == 0, #lines .. " require cycle(s):\n  " .. table.concat(lines, "\n  "))
  end)
end)

describe("the module graph scanner", function()
  local dir

  local function write(rel, text)
    local path = dir .. "/" .. rel
    assert(os.execute("mkdir -p '" .. path:match("^(.*)/[^/]+$") .. "'"))
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
  end)

  after_each(function()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("reads every literal form of require, and none in comments or other strings", function()
    local found = G.requires([=[
local a = require "sandstack.a"
local b = require('sandstack.b')
local c = require 'sandstack.c'
local d = require [[sandstack.d]]
local e = require ( "sandstack.e" ).field
local ok, f = pcall(require, "sandstack.f")
local function later() return require("sandstack.g") end
-- require "sandstack.commented"
--[[ require("sandstack.long_comment") ]]
local s = "require 'sandstack.in_a_string'"
local t = obj:require("sandstack.a_method")
local u = require("sandstack.prefix." .. name)
local v = require "sandstack.a"
]=])
    assert.same({ "sandstack.a", "sandstack.b", "sandstack.c", "sandstack.d", "sandstack.e", "sandstack.f",
      "sandstack.g" }, found)
  end)

  it("maps names to files, a.lua before a/init.lua", function()
    write("sandstack/init.lua", "return {}")
    write("sandstack/x.lua", "return {}")
    write("sandstack/y/init.lua", "return {}")
    write("sandstack/x/init.lua", "return {}")
    write("sandstack/y/z.lua", "return {}")
    local files = G.modules(dir)
    assert.equal(dir .. "/sandstack/init.lua", files["sandstack"])
    assert.equal(dir .. "/sandstack/x.lua", files["sandstack.x"])
    assert.equal(dir .. "/sandstack/y/init.lua", files["sandstack.y"])
    assert.equal(dir .. "/sandstack/y/z.lua", files["sandstack.y.z"])
  end)

  it("names a cycle held open by a require inside a function, its modules in order", function()
    write("sandstack/init.lua", 'return { top = require "sandstack.top" }')
    write("sandstack/top.lua", 'local mid = require("sandstack.mid.part")\nreturn {}')
    write("sandstack/mid/part.lua", "local core = require 'sandstack.core'\nreturn require 'sandstack.leaf'")
    write("sandstack/leaf/init.lua", 'return { back = function() return require("sandstack.top") end }')
    write("sandstack/alone.lua", 'local leaf = require "sandstack.leaf"\nreturn {}')
    local graph = G.graph(dir)
    assert.same({ "sandstack.leaf" }, graph["sandstack.mid.part"], "sandstack.core has no file, so no edge")
    local cycles = G.cycles(graph)
    assert.equal(1, #cycles)
    assert.equal("sandstack.leaf -> sandstack.top -> sandstack.mid.part -> sandstack.leaf", G.describe(cycles[1]))
  end)

  it("lists a cycle for every require inside a knot, and a module requiring itself", function()
    local cycles = G.cycles({
      a = { "b" }, b = { "a", "c" }, c = { "a" }, d = { "d" }, e = { "a" },
    })
    local seen = {}
    for _, cycle in ipairs(cycles) do seen[#seen + 1] = G.describe(cycle) end
    table.sort(seen)
    assert.same({ "a -> b -> a", "b -> c -> a -> b", "d -> d" }, seen)
  end)

  it("finds no cycle where there is none", function()
    assert.same({}, G.cycles({ a = { "b", "c" }, b = { "c" }, c = {} }))
  end)
end)
