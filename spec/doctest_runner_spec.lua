-- The doc-example runner (spec/support/doctest.lua) fails when an example is wrong: a block
-- that raises, one that does not compile, a marked block naming what sandstack lacks, a block
-- leaving a labelled object behind, and README.md's first example broken on purpose.
local doctest = require "doctest"
local sandstack = require "sandstack"
local h = require "helpers"

local function md(...)
  return table.concat({ ... }, "\n") .. "\n"
end

describe("doctest.blocks", function()
  it("reads fences, indented ones and the skip marker", function()
    local bs = doctest.blocks("x.md", md("text", "```lua", "local a = 1", "```", "",
      "<!-- doctest: skip, needs the sbx CLI -->", "", "  ```sh", "  sandstack ls", "  ```",
      "```json", "{}", "```"))
    assert.equal(2, #bs)
    assert.same({ "x.md", 2, "lua", "local a = 1" }, { bs[1].file, bs[1].line, bs[1].lang, bs[1].code })
    assert.is_nil(bs[1].skip)
    assert.equal("needs the sbx CLI", bs[2].skip)
    assert.equal("needs x (see y)", doctest.blocks("x.md", md("<!-- doctest: skip, needs x (see y) -->", "```lua", "x()", "```"))[1].skip)
    assert.equal("needs x", doctest.blocks("x.md", md("<!-- doctest: skip (needs x) -->", "```lua", "x()", "```"))[1].skip)
    assert.equal("sandstack ls", bs[2].code)
    assert.same({ "sandstack ls" }, doctest.commands(bs[2].code))
  end)

  it("refuses a marker without a reason", function()
    assert.has_error(function() doctest.blocks("x.md", md("<!-- doctest: skip -->", "```lua", "x()", "```")) end)
  end)

  it("finds the sandstack names a block uses, not those in strings and comments", function()
    local names = doctest.names('local s = require "sandstack"\ns.x()\nsandstack.docker.start("a.sandstack.b")\n' ..
      '-- sandstack.nope\nlocal w = require("sandstack").swarm\n')
    assert.same({ "docker.start", "swarm" }, names)
    assert.same({ "docker.nope" }, doctest.missing("sandstack.docker.nope()", sandstack))
  end)
end)

describe("doctest.made_by", function()
  it("takes the block's own projects only", function()
    local names = doctest.literals('start("docs-42") pool{ name = "docs-agents" } start("docs-session-" .. hex) require "sandstack"')
    for _, p in ipairs { "docs-42", "sandstack-docs-42", "docs-agents-1a2b3c4d", "sandstack-docs-session-a1b2c3" } do
      assert.is_true(doctest.made_by(p, names), p)
    end
    for _, p in ipairs { "sandstack-sstest-safety-562bc2", "docs-42-x", "sandstack-1a2b", "docs-agents-xyz", "other" } do
      assert.is_false(doctest.made_by(p, names), p)
    end
  end)
end)

describe("doctest.check fails", function()
  local ctx = { sandstack = sandstack, top = "." }

  it("on a block that raises", function()
    local b = doctest.blocks("x.md", md("```lua", 'error("broken on purpose")', "```"))[1]
    local res, why = doctest.check(b, ctx)
    assert.is_nil(res)
    assert.matches("broken on purpose", why)
  end)

  it("on a block that does not compile, marked or not", function()
    for _, pre in ipairs { "", "<!-- doctest: skip, cannot run here -->" } do
      local b = doctest.blocks("x.md", md(pre, "```lua", "local = 1", "```"))[1]
      local res, why = doctest.check(b, ctx)
      assert.is_nil(res)
      assert.matches("does not compile", why)
    end
  end)

  it("on a marked block naming what sandstack lacks", function()
    local b = doctest.blocks("x.md", md("<!-- doctest: skip, cannot run here -->", "```lua",
      "sandstack.docker.strat('k', {})", "```"))[1]
    local res, why = doctest.check(b, ctx)
    assert.is_nil(res)
    assert.matches("sandstack.docker.strat", why, 1, true)
  end)

  it("on a shell block whose sandstack command fails", function()
    local b = doctest.blocks("x.md", md("```sh", "sandstack no-such-command", "```"))[1]
    local res, why = doctest.check(b, ctx)
    assert.is_nil(res)
    assert.matches("exited", why)
  end)

  it("passes a good block and a marked one", function()
    local bs = doctest.blocks("x.md", md("```lua", 'assert(require("sandstack").policy.compile { allow = { "a.example" } })',
      "```", "<!-- doctest: skip, cannot run here -->", "```lua", "sandstack.docker.start('k', {})", "```"))
    assert.equal("ran", doctest.check(bs[1], ctx))
    assert.equal("skipped", doctest.check(bs[2], ctx))
  end)
end)

describe("doctest.check on the engine #docker", function()
  local eng
  setup(function() eng = assert(sandstack.engine { timeout = 60 }) end)
  teardown(function() eng:close() end)

  it("fails on a block that leaves a labelled object, and removes it", function()
    local project = "doctest-leak-" .. h.random_suffix(4)
    local code = ([[
local eng = assert(require("sandstack").engine{})
assert(eng:call("POST", "/volumes/create", { Name = "%s-v", Labels = { ["io.sandstack.project"] = "%s" } }))
eng:close()]]):format(project, project)
    local b = doctest.blocks("x.md", md("```lua", code, "```"))[1]
    local removed = {}
    local res, why = doctest.check(b, { sandstack = sandstack, top = ".", engine = eng,
      cleanup = function(projects)
        for p in pairs(projects) do removed[#removed + 1] = p; assert(sandstack.docker.down(p)) end
      end })
    assert.is_nil(res)
    assert.matches("left behind: volume " .. project .. "-v", why, 1, true)
    assert.same({ project }, removed)
    assert.same({}, (doctest.leftovers(eng, code)))
  end)

  it("fails on README.md's first example broken on purpose", function()
    local f = assert(io.open("README.md"))
    local text = f:read("a")
    f:close()
    local first
    for _, b in ipairs(doctest.blocks("README.md", text)) do
      if b.lang == "lua" and not b.skip then first = b; break end
    end
    -- its own session key: spec/doc_examples_spec.lua runs the same block in another lane, and
    -- two starts of one key at once collide (conflict: the other's stack is partial)
    local n
    first.code, n = first.code:gsub('(sandstack%.docker%.start%(")([^"]+)"', '%1%2-runner"', 1)
    assert.equal(1, n, "README.md's first example starts no sandstack.docker.start(\"KEY\", ...)")
    assert.equal("ran", doctest.check(first, { sandstack = sandstack, top = ".", engine = eng }))
    first.code = first.code:gsub('command = { "agent" }', 'command = { "no-such-agent" }', 1)
    local res, why = doctest.check(first, { sandstack = sandstack, top = ".", engine = eng,
      cleanup = function(projects) for p in pairs(projects) do sandstack.docker.down(p) end end })
    assert.is_nil(res)
    assert.is_string(why)
  end)
end)
