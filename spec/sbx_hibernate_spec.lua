-- A sandbox over time on sbx (its simulator): hibernate is `sbx stop`, which keeps the files,
-- and wake starts it again; twice, with a file written between the cycles. Every other method
-- of a session over time is there and answers a typed unsupported.
local core = require "sandstack.core"
local H = require "sbx_helpers"

describe("sbx hibernate and wake #docker", function()
  local env, backend
  setup(function() env, backend = H.setup_backend("hib") end)
  teardown(function() assert.equal(0, H.teardown_backend(env, backend)) end)

  local function status(name)
    for _, sb in ipairs(core.json_decode(H.sbx(env, "ls", "--json")).sandboxes) do
      if sb.name == name then return sb.status end
    end
  end

  it("stops with sbx stop and wakes with the files kept, twice", function()
    local box = assert(backend:acquire { conversation = "c", key = "hib" })
    for cycle = 1, 2 do
      assert(box:write("cycle-" .. cycle .. ".txt", "c" .. cycle))
      assert.is_true(assert(box:hibernate()))
      assert.equal("stopped", status(box.name))
      assert.is_true(assert(box:wake()))
      assert.equal("running", status(box.name))
    end
    for cycle = 1, 2 do
      local r = assert(box:exec({ "cat", "cycle-" .. cycle .. ".txt" }))
      assert.equal("c" .. cycle, r.stdout)
    end
    assert(box:dispose())
  end)

  it("answers unsupported, typed, for what sbx cannot do", function()
    local box = assert(backend:acquire { conversation = "c", key = "uns" })
    for _, m in ipairs { "pause", "resume", "snapshot", "fork", "changes", "set_timeout", "expires" } do
      local ok, err = box[m](box)
      assert.is_nil(ok, m)
      assert.equal("unsupported", err.kind, m)
      assert.equal(m, err.reason)
      assert.matches("sbx", err.message)
    end
    assert(box:dispose())
  end)
end)
