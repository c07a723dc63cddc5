-- The specs load `sandstack` modules from this checkout only (spec/support/tree_modules.lua, the
-- helper .busted names): an installed copy elsewhere on package.path, as bootstrap.sh leaves in
-- /usr/local, never stands in for a module the tree lacks.
describe("the specs' module search", function()
  local dir, saved_path

  before_each(function()
    saved_path = package.path
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/sandstack"))
    local f = assert(io.open(dir .. "/sandstack/zz_installed_only.lua", "w"))
    f:write('return "the installed copy"\n')
    f:close()
    f = assert(io.open(dir .. "/sandstack/policy.lua", "w"))
    f:write('return "a stale policy"\n')
    f:close()
    package.path = package.path .. ";" .. dir .. "/?.lua"
  end)

  after_each(function()
    package.path = saved_path
    package.loaded["sandstack.zz_installed_only"] = nil
    os.execute("rm -rf " .. dir)
  end)

  it("refuses a sandstack module found only outside the checkout", function()
    local ok, err = pcall(require, "sandstack.zz_installed_only")
    assert.is_false(ok)
    assert.matches("module 'sandstack.zz_installed_only' is not in this checkout", err, 1, true)
  end)

  it("loads the checkout's module and C core even when a copy elsewhere comes first", function()
    package.path = dir .. "/?.lua;" .. saved_path
    local loaded = package.loaded["sandstack.policy"]
    package.loaded["sandstack.policy"] = nil
    local ok, policy = pcall(require, "sandstack.policy")
    package.loaded["sandstack.policy"] = loaded
    assert.is_true(ok, policy)
    assert.equal("table", type(policy))
    assert.equal("table", type(require "sandstack.core"))
  end)

  it("leaves other modules to the usual search", function()
    local f = assert(io.open(dir .. "/zz_other_module.lua", "w"))
    f:write('return "found"\n')
    f:close()
    assert.equal("found", require "zz_other_module")
    package.loaded.zz_other_module = nil
  end)
end)
