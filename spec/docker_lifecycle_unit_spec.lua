-- The parts of a stack over time that need no engine: the requests the C core makes for them
-- (core.session_requests), the options a snapshot keeps (never a secret), and the checks of
-- the expiry options.
local sandstack = require "sandstack"
local core = sandstack.core
local snapshot = require "sandstack.docker.snapshot"
local expiry = require "sandstack.docker.expiry"

describe("session requests", function()
  it("pause and unpause one request per container, in order", function()
    local r = core.session_requests("pause", { "p-sandbox", "p-forwarder" })
    assert.equal(2, #r)
    assert.same({ "POST", "/containers/p-sandbox/pause" }, { r[1].method, r[1].path })
    assert.equal("/containers/p-forwarder/pause", r[2].path)
    assert.equal("/containers/p-sandbox/unpause", core.session_requests("unpause", { "p-sandbox" })[1].path)
  end)

  it("stop carries the grace period and a deadline beyond it; 304 is done", function()
    local r = core.session_requests("stop", { "x" }, { t = 3 })[1]
    assert.equal("3", r.query.t)
    assert.equal(33, r.timeout)
    assert.same({ 304 }, r.ok)
  end)

  it("a checkpoint stops the container; a restore starts it from the same checkpoint, which is then removed", function()
    local c = core.session_requests("checkpoint", { "p-sandbox" }, { timeout = 300 })[1]
    assert.same({ "POST", "/containers/p-sandbox/checkpoints", 300 }, { c.method, c.path, c.timeout })
    local body = core.json_decode(c.body_json)
    assert.is_true(body.Exit)
    local r = core.session_requests("restore", { "p-sandbox" })[1]
    assert.same({ "POST", "/containers/p-sandbox/start" }, { r.method, r.path })
    assert.same({ checkpoint = body.CheckpointID }, r.query)
    local l = core.session_requests("list_checkpoints", { "p-sandbox" })[1]
    assert.same({ "GET", "/containers/p-sandbox/checkpoints" }, { l.method, l.path })
    local d = core.session_requests("remove_checkpoint", { "p-sandbox" })[1]
    assert.same({ "DELETE", "/containers/p-sandbox/checkpoints/" .. body.CheckpointID }, { d.method, d.path })
    assert.same({ 404 }, d.ok)
  end)

  it("a wake's start from a checkpoint is tried again while the engine answers its content-store race, and only then", function()
    local lifecycle = require "sandstack.docker.lifecycle"
    local E = require "sandstack.error"
    -- the engine's answers, settled as the engine client settles them (their cause read in C)
    local engine_error = require("sandstack.engine").engine_error
    local race = engine_error(500, "POST", "/containers/x/start", "failed to upload checkpoint to containerd: "
      .. "commit failed: content sha256:" .. ("ab"):rep(32) .. ": already exists")
    local function script(answers)
      local calls, slept = 0, {}
      local ok, err = lifecycle.start_from_checkpoint(function()
        calls = calls + 1
        local a = answers[calls] or answers[#answers]
        if a == true then return true end
        return nil, a
      end, function(s) slept[#slept + 1] = s end)
      return ok, err, calls, slept
    end
    -- twice the race, then the start: started, after two waits
    local ok, err, calls, slept = script { race, race, true }
    assert.is_true(ok, tostring(err))
    assert.equal(3, calls)
    assert.same({ 0.5, 1 }, slept)
    -- another failure of the restore is not retried: it is the wake's to report
    local criu = engine_error(500, "POST", "/containers/x/start", "failed to create task for container: criu failed: type RESTORE")
    ok, err, calls = script { criu }
    assert.is_nil(ok)
    assert.equal(criu, err)
    assert.equal(1, calls)
    -- the race every time: given up after the bound, with the engine's answer
    ok, err, calls = script { race }
    assert.is_nil(ok)
    assert.equal(race, err)
    assert.equal(lifecycle.RESTORE_ATTEMPTS, calls)
    -- an error of another kind that happens to say "already exists" is not the race
    local other = E.new("invalid", nil, "the checkpoint already exists")
    ok, err, calls = script { other }
    assert.equal(1, calls)
  end)

  it("commit names the container, repository and tag, pauses, and labels the image", function()
    local r = core.session_requests("commit", { "p-sandbox" }, { repo = "sandstack-snapshot", tag = "snap-1",
      labels = { ["io.sandstack.snapshot"] = "snap-1" } })[1]
    assert.same({ container = "p-sandbox", repo = "sandstack-snapshot", tag = "snap-1", pause = "true" }, r.query)
    assert.same({ Labels = { ["io.sandstack.snapshot"] = "snap-1" } }, core.json_decode(r.body_json))
    assert.has_error(function() core.session_requests("commit", { "p" }, { repo = "r" }) end)
  end)

  it("lists by one label, encoded as a filter, whatever the label's text", function()
    local r = core.session_requests("list_volumes", nil, { label = 'a="b"' })[1]
    assert.equal("/volumes", r.path)
    assert.same({ label = { 'a="b"' } }, core.json_decode(r.query.filters))
    assert.equal("1", core.session_requests("list_containers", nil, { label = "x" })[1].query.all)
  end)

  it("removals accept 404 and volumes are forced", function()
    local r = core.session_requests("remove_volume", { "v" })[1]
    assert.same({ "DELETE", "/volumes/v", "1" }, { r.method, r.path, r.query.force })
    assert.same({ 404 }, r.ok)
    assert.same({ 404 }, core.session_requests("remove_image", { "i:t" })[1].ok)
  end)

  it("reads the engine's disk usage in one unnamed request", function()
    local r = core.session_requests("disk_usage")
    assert.same({ 1, "GET", "/system/df" }, { #r, r[1].method, r[1].path })
  end)

  it("an unknown action raises", function()
    assert.has_error(function() core.session_requests("explode", { "x" }) end)
  end)
end)

describe("a snapshot's options", function()
  it("take more labels, never the snapshot's own or a project's, before anything is asked of the engine", function()
    local stack = { eng = setmetatable({}, { __index = function() error("the engine was asked") end }), spec = {} }
    for _, bad in ipairs { { ["io.sandstack.snapshot"] = "x" }, { ["io.sandstack.snapshot.name"] = "x" },
      { ["io.sandstack.project"] = "p" } } do -- a value sandstack keeps for itself: refused
      local r, err = snapshot.snapshot(stack, { labels = bad })
      assert.is_nil(r)
      assert.same({ "invalid", "invalid_option", "labels" }, { err.kind, err.reason, err.option })
    end
    for _, bad in ipairs { { owner = 1 }, "owner=me" } do -- a wrong type: raised
      local ok, err = pcall(snapshot.snapshot, stack, { labels = bad })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("'labels'", 1, true), tostring(err))
    end
  end)

  it("keep no secret, no project name and no expiry", function()
    local spec = snapshot.spec_of { project_name = "p", api_key = "K" .. string.rep("k", 40), session_token = "T",
      ttl = 5, idle_timeout = 3, on_expiry = "destroy", agent_port = 8080,
      credentials = { { name = "X", host = "h", secret = "S3CRET", placeholder = "PH" } },
      on_event = function() end }
    local text = core.json_encode(spec)
    for _, s in ipairs { "kkkk", "S3CRET", "PH", "\"T\"" } do assert.is_nil(text:find(s, 1, true), s) end
    assert.is_nil(spec.project_name)
    assert.is_nil(spec.ttl)
    assert.equal(8080, spec.agent_port)
    assert.same({ { name = "X", host = "h" } }, spec.credentials)
  end)

  it("keep no env entry that holds a secret or names the model key, map or list", function()
    local key = "sk-live-" .. string.rep("q", 30)
    local spec = snapshot.spec_of { api_key = key, credentials = { { name = "X", host = "h", secret = "S3CRET-1" } },
      services = {
        { name = "a", env = { ANTHROPIC_API_KEY = key, KEEP = "1", COPY = "x" .. key, TOK = "Bearer S3CRET-1" } },
        { name = "b", env = { "ANTHROPIC_API_KEY=" .. key, "KEEP=2", "OTHER=" .. key } },
      } }
    local text = core.json_encode(spec)
    assert.is_nil(text:find("sk-live", 1, true))
    assert.is_nil(text:find("S3CRET", 1, true))
    assert.same({ KEEP = "1" }, spec.services[1].env)
    assert.same({ "KEEP=2" }, spec.services[2].env)
  end)
end)

describe("expiry options", function()
  it("take seconds > 0 and destroy or hibernate", function()
    assert.is_true(expiry.check(1, 0.5, "hibernate", "t"))
    assert.is_true(expiry.check(nil, nil, nil, "t"))
    for _, bad in ipairs { { 0 }, { -1 }, { 0 / 0 }, { math.huge }, { nil, 0 }, { nil, nil, "pause" } } do
      local ok, err = expiry.check(bad[1], bad[2], bad[3], "t")
      assert.is_nil(ok)
      assert.same({ "compose", "invalid_option" }, { err.kind, err.reason })
    end
    for _, bad in ipairs { { "5" }, { nil, true }, { nil, nil, 1 } } do -- a wrong type raises
      assert.has_error(function() expiry.check(bad[1], bad[2], bad[3], "t") end)
    end
  end)
end)

describe("the same methods on every backend", function()
  local methods = { "pause", "resume", "hibernate", "wake", "snapshot", "fork", "changes", "set_timeout", "expires" }

  it("a swarm session answers typed unsupported for what it cannot do, without an engine", function()
    local sh = require "sandstack.swarm.handle"
    local stack = sh.new({ close = function() end }, { close = function() end }, { hostname = "n", id = "i", engine = "e" },
      { project = "p", session_key = "k", containers = {}, sandbox = "sandbox", forwarder = "forwarder" })
    for _, m in ipairs(methods) do assert.is_function(stack[m], m) end
    for _, m in ipairs { "snapshot", "fork", "changes" } do -- hibernate, wake and expiry: swarm_lifecycle_unit_spec
      local ok, err = stack[m](stack)
      assert.is_nil(ok, m)
      assert.equal("unsupported", err.kind)
      assert.equal(m, err.reason)
      assert.equal("swarm", err.backend)
    end
  end)

  it("the docker handle has every method", function()
    local dh = require "sandstack.docker.handle"
    local stack = dh.new({ close = function() end }, { project = "p", session_key = "k", containers = {}, networks = {},
      volumes = {}, sandbox = "sandbox", forwarder = "forwarder" })
    for _, m in ipairs(methods) do assert.is_function(stack[m], m) end
  end)
end)

describe("pause against a scripted engine (no engine)", function()
  local scripted = require "spec.support.scripted_engine"
  local L = require "sandstack.docker.lifecycle"

  -- a stack of a sandbox, a sidecar, the added proxy and the forwarder; `answer(path, n)` gives
  -- each request's status and body (n: how many times that path was asked)
  local function stack_with(answer)
    local eng = scripted.new(function(_, p, _, _, n) return answer(p, n) end)
    local plan = { project = "p", forwarder = "forwarder", proxy = { added = true, service = "proxy" }, containers = {
      { name = "p-db", service = "db" }, { name = "p-sandbox", service = "sandbox" },
      { name = "p-proxy", service = "proxy" }, { name = "p-forwarder", service = "forwarder" } } }
    return { eng = eng, plan = plan }, eng
  end

  it("freezes the services only, and asks again for one that runc could not freeze in time", function()
    local s, eng = stack_with(function(p, n)
      if p == "/containers/p-db/pause" and n < 3 then
        return 500, { message = "Cannot pause container p-db: OCI runtime pause failed: unable to freeze: unknown" }
      end
      return 204, nil
    end)
    assert.is_true(L.pause(s))
    assert.same({ "POST /containers/p-db/pause", "POST /containers/p-sandbox/pause", "POST /containers/p-db/pause",
      "POST /containers/p-db/pause" }, eng.log)
    eng.log = {}
    assert.is_true(L.resume(s))
    assert.same({ "POST /containers/p-db/unpause", "POST /containers/p-sandbox/unpause" }, eng.log)
  end)

  it("gives up after its retries and thaws what it froze", function()
    local s, eng = stack_with(function(p)
      if p == "/containers/p-db/pause" then return 500, { message = "OCI runtime pause failed: unable to freeze: unknown" } end
      return 204, nil
    end)
    local ok, err = L.pause(s)
    assert.is_nil(ok)
    assert.truthy(err.message:find("unable to freeze", 1, true))
    assert.equal(4, eng.seen["/containers/p-db/pause"])
    assert.equal(1, eng.seen["/containers/p-sandbox/unpause"])
  end)
end)
