-- A retirement that cannot be recorded is an error, not a silent success.
-- The workspace root sits on a small tmpfs that the test fills, as a full disk would.
local sbx = require "sandstack.sbx"
local H = require "sbx_helpers"
-- internals under test: the record, and the Box's retirement and usability
local records = require "sandstack.sbx.records"
local retirement = require "sandstack.sbx.retirement"

describe("sbx record on a full disk #docker", function()
  local env, backend, mounted
  setup(function()
    env = H.setup("record")
    H.sh("mkdir -p " .. H.q(env.workspace_root))
    local _, code = H.sh("mount -t tmpfs -o size=4m sstest-record " .. H.q(env.workspace_root))
    mounted = code == 0
    backend = assert(sbx.backend(env.backend_opts))
  end)
  teardown(function()
    H.sh("rm -f " .. H.q(env.workspace_root .. "/fill"))
    require("sandstack.sbx.dispose").prefix(backend, env.backend_opts.name_prefix)
    backend:close()
    if not H.e2e then H.sbx(env, "sim", "cleanup") end -- no container may hold the mount
    if mounted then
      local _, code = H.sh("umount " .. H.q(env.workspace_root))
      if code ~= 0 then H.sh("umount -l " .. H.q(env.workspace_root)) end
    end
    H.teardown(env)
    assert.equal(0, H.containers(env))
  end)

  it("a retirement returns an error when the record cannot be written", function()
    if not mounted then pending("needs root to mount a tmpfs") return end
    local box = assert(backend:acquire{ conversation = "c", key = "full" })
    local rec = assert(records.read(backend, box.name))
    assert.is_nil(rec.retired)
    -- fill the disk; the control write below shows it is really full
    H.sh("dd if=/dev/zero of=" .. H.q(env.workspace_root .. "/fill") .. " bs=64k 2>/dev/null")
    local probe = io.open(env.workspace_root .. "/probe", "w")
    local wrote = probe and probe:write(string.rep("x", 65536)) and probe:close()
    os.remove(env.workspace_root .. "/probe")
    assert.is_falsy(wrote, "control: the tmpfs is not full")
    local ok, err = retirement.retire(box, "test")
    assert.is_nil(ok, "a retirement that was not recorded was reported as done")
    assert.equal("io", err.kind) -- host I/O, through the records plane
    assert.equal("ENOSPC", err.reason)
    assert.matches("other processes", err.message)
    -- this process knows; the record on disk is the old one, whole
    local _, uerr = retirement.usable(box)
    assert.equal("retired", uerr.kind)
    rec = assert(records.read(backend, box.name))
    assert.is_nil(rec.retired)
    -- with room again, the mark is written
    H.sh("rm -f " .. H.q(env.workspace_root .. "/fill"))
    assert.is_true(retirement.retire(box, "test"))
    assert.equal("test", records.read(backend, box.name).retired)
    assert(box:dispose())
  end)
end)
