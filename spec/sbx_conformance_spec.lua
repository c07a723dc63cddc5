-- The sbx conformance suites (sandstack.conformance_sbx) pass against the simulator, or
-- against a real sbx with SANDSTACK_SBX_E2E=1.
local conformance = require "sandstack.conformance_sbx"
local H = require "sbx_helpers"

describe("sbx conformance #docker", function()
  it("EXEC, EGRESS, EGRESS_METHODS and reach pass", function()
    local env = H.setup("conf")
    local lines = {}
    local ok, passed, failed = conformance.run{ sbx_path = env.sbx, workspace_root = env.workspace_root,
      exec_cleanup_timeout = 30, out = function(s) lines[#lines + 1] = s end }
    H.teardown(env)
    local tap = table.concat(lines)
    assert.is_true(ok, tap)
    assert.equal(0, failed)
    assert.is_true(passed >= 20, tap)
    assert.matches("\n1%.%." .. passed .. "\n$", tap)
    assert.equal(0, H.containers(env))
  end)

  it("a failing check is reported as not ok", function()
    local lines = {}
    local root = os.tmpname()
    os.remove(root)
    local ok, _, failed = conformance.run{ sbx_path = "/nonexistent/sbx", workspace_root = root,
      suites = { "EXEC" }, out = function(s) lines[#lines + 1] = s end }
    assert.is_false(ok)
    assert.is_true(failed >= 1)
    assert.matches("not ok 1", table.concat(lines))
    require("sandstack.core").rmtree(root)
  end)
end)
