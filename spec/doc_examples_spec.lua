-- The documentation's examples are tests (spec/support/doctest.lua): every ```lua block of
-- README.md and docs/ runs against this machine's engine with the images the README's commands
-- build, every shell block's `sandstack` lines run, and a marked block is compiled and its
-- sandstack.* names looked up. The last test prints how many ran and each marker's reason.
local doctest = require "doctest"
local sandstack = require "sandstack"

local top = os.getenv("PWD") or "."
local engine_mode = os.getenv("SANDSTACK_TEST_MODE") ~= "luajit"

local function read(path) return assert(require("helpers").read_file(path)) end

local blocks = {}
for _, file in ipairs(doctest.files(top)) do
  for _, b in ipairs(doctest.blocks(file, read(file))) do blocks[#blocks + 1] = b end
end

local tally = { ran = 0, skipped = 0, no_command = 0, reasons = {} }

describe("the documentation's examples", function()
  local eng
  setup(function()
    if engine_mode then eng = assert(sandstack.engine { timeout = 60 }) end
  end)
  teardown(function()
    if eng then eng:close() end
  end)

  it("are found", function()
    assert.is_true(#blocks >= 10, "only " .. #blocks .. " blocks found")
  end)

  for _, b in ipairs(blocks) do
    local name = ("%s:%d (%s)%s"):format(b.file, b.line, b.lang, b.skip and (" marked: " .. b.skip) or "")
    it(name, function()
      local ctx = { sandstack = sandstack, top = top }
      if engine_mode then
        ctx.engine = eng
        ctx.cleanup = function(projects)
          for p in pairs(projects) do sandstack.docker.down(p) end
        end
      elseif not b.skip then
        -- LuaJIT runs the unit specs only: the block is compiled and its names checked here,
        -- and runs in the lua54 and asan modes.
        b = setmetatable({ skip = "engine-less mode" }, { __index = b })
      end
      local res, why = doctest.check(b, ctx)
      assert(res, name .. ": " .. tostring(why))
      tally[res] = tally[res] + 1
      if res == "skipped" and b.skip ~= "engine-less mode" then
        tally.reasons[b.skip] = (tally.reasons[b.skip] or 0) + 1
      end
    end)
  end

  it("are counted", function()
    local lines = { ("ran %d, marked %d, shell blocks without a sandstack command %d"):format(
      tally.ran, tally.skipped, tally.no_command) }
    for reason, n in pairs(tally.reasons) do lines[#lines + 1] = ("  marked %d: %s"):format(n, reason) end
    io.stdout:write("# doc examples: ", table.concat(lines, "\n# "), "\n")
    if engine_mode then assert.is_true(tally.ran > 0) end
  end)
end)
