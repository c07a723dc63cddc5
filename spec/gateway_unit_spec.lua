-- The gateway's pure parts without nginx (every mode): configuration checks, tenant and secret
-- checks, limits, the expiry rule, the metrics text and the rendered nginx.conf. A tiny
-- in-memory stand-in for ngx.shared dicts carries the dict-based parts.
local core = require "sandstack.core"
local config = require "sandstack.gateway.config"
local auth = require "sandstack.gateway.auth"
local limits = require "sandstack.gateway.limits"
local expiry = require "sandstack.gateway.expiry"
local metrics = require "sandstack.gateway.metrics"
local nginx_conf = require "sandstack.gateway.nginx_conf"

local dict = require "spec.support.shared_dict"

local TOKEN = "tok-" .. core.random_hex(8)
local function base(extra)
  local t = { tenants = { { name = "a", token_sha256 = core.sha256_hex(TOKEN), max_sessions = 1 } },
    stack = { services = {} } }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

describe("gateway config", function()
  it("fills defaults and keeps digests, lowercased", function()
    local t = base()
    t.tenants[1].token_sha256 = t.tenants[1].token_sha256:upper()
    local c = assert(config.check(t))
    assert.equal(core.sha256_hex(TOKEN), c.tenants[1].token_sha256)
    assert.equal(1800, c.idle_ttl)
    assert.equal("gw-", c.project_prefix)
  end)

  it("refuses plain tokens, unknown keys, bad numbers and nginx injection", function()
    local cases = {
      base { tenants = { { name = "a", token_sha256 = TOKEN } } },
      base { tenants = {} },
      base { tenants = { { name = "a", token_sha256 = core.sha256_hex("x") }, { name = "a", token_sha256 = core.sha256_hex("y") } } },
      base { colour = "blue" },
      base { idle_ttl = 0 },
      base { idle_ttl = 100, max_ttl = 10 },
      base { listen = "127.0.0.1:80; include /etc/passwd" },
      base { client_max_body_size = "1m\n" },
      base { lua_path = 'x"; evil' },
      base { stack = { project_name = "x" } },
      base { stack = { on_event = print } },
      base { pool = { size = 3, max = 1 } },
      base { pool = { sizes = 1 } },
      base { nginx = { location = "x" } },
      base { name = "Upper" },
    }
    for i, t in ipairs(cases) do
      local c, err = config.check(t)
      assert.is_nil(c, "case " .. i)
      assert.equal("invalid", err.kind, "case " .. i)
      assert.is_true(core.is_error(err))
    end
  end)

  it("checks the sessions' egress policy, allow_private included, before nginx starts", function()
    local pol = { allow = { "registry.internal:5000" }, allow_private = { "10.0.0.7" } }
    local c = assert(config.check(base { stack = { services = {}, egress_policy = pol } }))
    assert.same({ "10.0.0.7" }, c.stack.egress_policy.allow_private)
    local _, err = config.check(base { stack = { services = {},
      egress_policy = { allow = { "registry.internal" }, allow_private = { "10.0.0.0/8" } } } })
    assert.equal("stack", err.option)
    assert.matches("allow_private 1 ('10.0.0.0/8'): name one address", err.message, 1, true)
    _, err = config.check(base { stack = { services = {}, egress_policy = "allow everything" } })
    assert.equal("stack", err.option)
  end)

  it("loads a file and reports its errors as error objects", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("return { tenants = { { name = 'a', token_sha256 = '" .. core.sha256_hex("t") .. "' } }, stack = {} }")
    f:close()
    assert.is_table(config.load(path))
    f = assert(io.open(path, "w"))
    f:write("return {")
    f:close()
    local c, err = config.load(path)
    os.remove(path)
    assert.is_nil(c)
    assert.equal("bad_config", err.reason)
    -- the shipped example is a valid configuration
    assert.is_table(assert(config.load("examples/openresty-gateway/config.lua")))
  end)
end)

describe("gateway tenant key spaces", function()
  local S = require "sandstack.gateway.sessions"
  local project_for = require("sandstack.gateway").project_for

  local function two(names, extra)
    local t = base(extra)
    t.tenants = {}
    for _, n in ipairs(names) do t.tenants[#t.tenants + 1] = { name = n, token_sha256 = core.sha256_hex(n) } end
    return config.check(t)
  end

  it("refuses what would not fit a project or a session key, and two tenants with one tag", function()
    assert(two({ "alice", "bob" }))
    local _, err = two({ ("t"):rep(65) })
    assert.equal("tenants", err.option)
    assert(two({ ("t"):rep(64) }))
    _, err = two({ "alice" }, { project_prefix = ("p"):rep(39) })
    assert.equal("project_prefix", err.option)
    assert(two({ "alice" }, { project_prefix = ("p"):rep(38) }))
    -- a tag collision (2^-32 for two names) is refused, never two tenants' stacks in one project
    local real = config.tenant_tag
    config.tenant_tag = function() return "0badf00d" end
    local ok, c, cerr = pcall(two, { "alice", "bob" })
    config.tenant_tag = real
    assert.is_true(ok, c)
    assert.is_nil(c)
    assert.equal("tenants", cerr.option)
    assert.truthy(cerr.message:find("same project tag", 1, true), cerr.message)
  end)

  it("gives each tenant's key its own sid, secret index and project", function()
    local d = dict()
    local ea = { tenant = "alice", key = "k", digest = auth.digest("sa") }
    local eb = { tenant = "bob", key = "k", digest = auth.digest("sb") }
    assert.is_true(S.claim(d, S.sid("alice", "k"), ea))
    assert.is_true(S.claim(d, S.sid("bob", "k"), eb)) -- the same key, another space: no conflict
    assert.same({ nil, "exists" }, { S.claim(d, S.sid("bob", "k"), { digest = auth.digest("x") }) })
    assert.equal("k.alice", (S.find(d, auth.digest("sa"))))
    assert.equal("k.bob", (S.find(d, auth.digest("sb"))))
    assert.is_nil(S.find(d, auth.digest("nobody")))
    S.remove(d, "k.bob", eb)
    assert.is_nil(S.find(d, auth.digest("sb")))
    assert.equal("k.alice", (S.find(d, auth.digest("sa"))))
    local c = assert(two({ "alice", "bob" }, { project_prefix = "gw-" }))
    local pa, pb = project_for(c, "alice", "k"), project_for(c, "bob", "k")
    assert.equal("gw-k." .. config.tenant_tag("alice"), pa)
    assert.not_equal(pa, pb)
    -- a key holds no ".", so no project of an older gateway (<prefix><key>) is one of these
    assert.is_nil(("gw-" .. "k"):find(".", 1, true))
    -- the longest key under the longest prefix still fits a project name (63), one per key
    local long = assert(two({ "alice" }, { project_prefix = ("p"):rep(38) }))
    local k1, k2 = ("a"):rep(48), ("a"):rep(47) .. "b"
    assert.is_true(#project_for(long, "alice", k1) <= 63)
    assert.not_equal(project_for(long, "alice", k1), project_for(long, "alice", k2))
  end)
end)

describe("gateway auth", function()
  it("compares equal strings only, whatever the length or position of a difference", function()
    local a = core.sha256_hex("x")
    assert.is_true(auth.equal(a, a))
    assert.is_false(auth.equal(a, a:sub(1, 63)))
    assert.is_false(auth.equal(a, "0" .. a:sub(2)))
    assert.is_false(auth.equal(a, a:sub(1, 63) .. "0"))
    assert.is_false(auth.equal(a, nil))
    assert.is_false(auth.equal("", "a"))
  end)

  it("finds the tenant of a bearer token and nobody for anything else", function()
    local c = assert(config.check(base { tenants = {
      { name = "a", token_sha256 = core.sha256_hex(TOKEN) },
      { name = "b", token_sha256 = core.sha256_hex("other") } } }))
    assert.equal("a", auth.tenant(c.tenants, auth.bearer("Bearer " .. TOKEN)).name)
    assert.equal("b", auth.tenant(c.tenants, auth.bearer("bearer other")).name)
    assert.is_nil(auth.tenant(c.tenants, auth.bearer("Basic " .. TOKEN)))
    assert.is_nil(auth.tenant(c.tenants, auth.bearer("Bearer " .. core.sha256_hex(TOKEN))))
    assert.is_nil(auth.tenant(c.tenants, auth.bearer("Bearer")))
    assert.is_nil(auth.tenant(c.tenants, nil))
  end)

  it("mints distinct secrets and keeps only their digests", function()
    local s1, d1 = auth.new_secret()
    local s2 = auth.new_secret()
    assert.matches("^" .. ("%x"):rep(64) .. "$", s1)
    assert.are_not.equal(s1, s2)
    assert.equal(core.sha256_hex(s1), d1)
    local entry = { digest = d1 }
    assert.is_true(auth.session_ok(entry, s1))
    assert.is_false(auth.session_ok(entry, s2))
    assert.is_false(auth.session_ok(entry, d1))
    assert.is_false(auth.session_ok(entry, nil))
    assert.is_false(auth.session_ok(entry, ""))
  end)
end)

describe("gateway limits", function()
  it("caps a tenant first, then the node, and gives places back", function()
    local d = dict()
    assert.is_true(limits.claim(d, "a", 2, 3))
    assert.is_true(limits.claim(d, "a", 2, 3))
    assert.same({ nil, "tenant" }, { limits.claim(d, "a", 2, 3) })
    assert.is_true(limits.claim(d, "b", nil, 3))
    assert.same({ nil, "global" }, { limits.claim(d, "b", nil, 3) })
    assert.equal(3, limits.count(d))
    assert.equal(2, limits.count(d, "a"))
    limits.release(d, "a")
    assert.is_true(limits.claim(d, "b", nil, 3))
    assert.equal(1, limits.count(d, "a"))
    assert.equal(2, limits.count(d, "b"))
  end)
end)

describe("gateway expiry rule", function()
  local c = { idle_ttl = 10, max_ttl = 100 }
  it("expires idle and old sessions, never one with an open stream before max_ttl", function()
    local e = { state = "ready", created = 1000 }
    assert.is_nil(expiry.why(e, 1005, 1000, 0, c))
    assert.equal("idle", expiry.why(e, 1011, 1001, 0, c))
    assert.is_nil(expiry.why(e, 1050, 1001, 1, c))
    assert.equal("max_ttl", expiry.why(e, 1100, 1099, 3, c))
    assert.is_nil(expiry.why({ state = "starting", created = 0 }, 1000, nil, 0, c))
  end)
end)

describe("gateway session table over time", function()
  -- the lifecycle handler with the engine's side stubbed: what the table says after each verb
  it("keeps a paused session as paused (its view, the counts and expiry), and a resumed one as ready", function()
    local S = require "sandstack.gateway.sessions"
    local lifecycle = require "sandstack.gateway.lifecycle"
    local d = dict()
    d:set("seen:k1.a", 1000)
    assert(S.ready(d, "k1.a", { tenant = "a", key = "k1", digest = "dg", created = 1000, record = { project = "p", port = 1 } }))
    local verbs, last = {}, nil
    local G = { dict = d, run_in = function(_, _, record, verb) verbs[#verbs + 1] = verb; return true, { record = record } end }
    local h = { reply = function(st, doc) last = { st, doc } end, fail = function(st, kind) last = { st, { kind = kind } } end,
      failure_status = function() return 500 end }
    lifecycle.handle(G, h, "k1.a", S.get(d, "k1.a"), "pause")
    assert.same({ 200, "paused" }, { last[1], last[2].state })
    assert.equal("paused", S.get(d, "k1.a").state)
    assert.equal("paused", S.view("k1", S.get(d, "k1.a")).state) -- GET /sessions/<key>, and the console's list
    assert.same({ starting = 0, ready = 0, paused = 1, hibernated = 0, stopping = 0 }, S.states(d))
    assert.truthy(metrics.render(dict(), S.states(d)):find('sandstack_gateway_sessions{state="paused"} 1\n', 1, true))
    lifecycle.handle(G, h, "k1.a", S.get(d, "k1.a"), "wake") -- a paused session is not hibernated
    assert.same({ 409, "conflict" }, { last[1], last[2].kind })
    assert.equal("max_ttl", expiry.why(S.get(d, "k1.a"), 1100, 1099, 0, { idle_ttl = 10, max_ttl = 100 }))
    lifecycle.handle(G, h, "k1.a", S.get(d, "k1.a"), "resume")
    assert.same({ 200, "ready" }, { last[1], last[2].state })
    assert.equal("ready", S.get(d, "k1.a").state)
    lifecycle.handle(G, h, "k1.a", S.get(d, "k1.a"), "resume") -- a running session resumes as it is
    assert.equal(200, last[1])
    assert.same({ "pause", "resume", "resume" }, verbs)
  end)
end)

describe("gateway metrics text", function()
  it("renders counters and cumulative histograms", function()
    local d = dict()
    metrics.observe(d, "sandstack_gateway_start_seconds", 3)
    metrics.observe(d, "sandstack_gateway_start_seconds", 0.2)
    metrics.failure(d, "engine")
    local text = metrics.render(d, { ready = 2 }, { ready = 1 })
    assert.truthy(text:find('sandstack_gateway_sessions{state="ready"} 2\n', 1, true), text)
    assert.truthy(text:find('sandstack_gateway_pool_stacks{state="ready"} 1\n', 1, true), text)
    assert.truthy(text:find('sandstack_gateway_start_seconds_bucket{le="0.25"} 1\n', 1, true), text)
    assert.truthy(text:find('sandstack_gateway_start_seconds_bucket{le="5"} 2\n', 1, true), text)
    assert.truthy(text:find('sandstack_gateway_start_seconds_bucket{le="+Inf"} 2\n', 1, true), text)
    assert.truthy(text:find('sandstack_gateway_failures_total{kind="engine"} 1\n', 1, true), text)
    -- buckets in ascending order
    assert.is_true(text:find('le="0.25"', 1, true) < text:find('le="5"', 1, true))
  end)
end)

describe("gateway nginx.conf", function()
  it("sets the limits, strips the secret and passes upgrades", function()
    local c = assert(config.check(base { client_max_body_size = "2k", proxy_read_timeout = 77 }))
    local text = nginx_conf.render(c, { config = "/x/gateway.json", lua_path = ";;", lua_cpath = ";;" })
    assert.truthy(text:find("client_max_body_size 2k;", 1, true))
    assert.truthy(text:find("proxy_read_timeout 77s;", 1, true))
    assert.truthy(text:find('proxy_set_header X-Sandstack-Session-Secret "";', 1, true))
    assert.truthy(text:find("proxy_set_header Upgrade $http_upgrade;", 1, true))
    assert.truthy(text:find("listen 127.0.0.1:9145;", 1, true))
    assert.is_nil(text:find("{{", 1, true))
  end)
end)

describe("gateway snapshot quota", function()
  local Q = require "sandstack.gateway.snapshot_quota"
  local MiB = 1024 * 1024

  it("is set per gateway, and per tenant over it; refused when not whole numbers", function()
    local c = assert(config.check(base()))
    assert.same({ count = 10, bytes = 10 * 1024 * MiB }, c.snapshot_quota)
    local t = base { snapshot_quota = { bytes = 5 * MiB } }
    t.tenants[1].snapshot_quota = { count = 2 }
    c = assert(config.check(t))
    assert.same({ count = 10, bytes = 5 * MiB }, c.snapshot_quota)
    assert.same({ count = 2, bytes = 5 * MiB }, c.tenants[1].snapshot_quota)
    for i, bad in ipairs { { count = -1 }, { bytes = 1.5 }, { size = 1 }, "10g" } do
      local _, err = config.check(base { snapshot_quota = bad })
      assert.equal("snapshot_quota", err and err.option, "case " .. i)
    end
  end)

  -- A /system/df answer: alice's two snapshots on this node (one kept), bob's one, another node's,
  -- and what is no snapshot at all.
  local function owner(tenant, key, created) return { node = "n1", tenant = tenant, key = key, created = created } end
  local function labels(id, o, keep, taken)
    local l = Q.labels(o, keep)
    l["io.sandstack.snapshot"], l["io.sandstack.created"] = id, tostring(taken)
    return l
  end
  local a1, b1 = owner("alice", "k1", 100), owner("bob", "k1", 100)
  local df = {
    Images = {
      { Id = "base", Size = 3 * MiB },
      { Id = "i1", ParentId = "base", Size = 8 * MiB, Labels = labels("snap-1", a1, false, 200) },
      { Id = "i2", ParentId = "base", Size = 4 * MiB, Labels = labels("snap-2", a1, true, 300) },
      { Id = "i3", ParentId = "i1", Size = 9 * MiB, Labels = labels("snap-3", b1, false, 250) }, -- built on i1
      { Id = "i4", ParentId = "base", Size = 50 * MiB, Labels = labels("snap-4", { node = "n2", tenant = "alice",
        key = "k1", created = 100 }, false, 200) },
    },
    Volumes = {
      { Name = "snap-1-workspace", Labels = labels("snap-1", a1, false, 200), UsageData = { Size = 2 * MiB } },
      { Name = "snap-2-workspace", Labels = labels("snap-2", a1, true, 300), UsageData = { Size = -1 } },
      { Name = "p-workspace", Labels = {}, UsageData = { Size = 7 * MiB } },
    },
    Containers = { { Names = { "/p-sandbox" }, SizeRw = 5 * MiB }, { Names = { "/p-other" }, SizeRw = 100 * MiB } },
  }

  it("counts a tenant's snapshots on this node: the image's own layer and each volume copy", function()
    local index = Q.index(df.Images, df.Volumes, "n1")
    assert.equal(5 * MiB + 2 * MiB, index["snap-1"].bytes) -- 8 - 3, and its copy
    assert.equal(1 * MiB, index["snap-2"].bytes) -- a size the engine does not report counts 0
    assert.equal(1 * MiB, index["snap-3"].bytes) -- its own layer only, over the image it was built on
    assert.is_nil(index["snap-4"]) -- another gateway's
    assert.same({ "snap-1-workspace" }, index["snap-1"].volumes)
    assert.is_true(index["snap-2"].keep)
    local used, list = Q.usage(index, "alice")
    assert.same({ count = 2, bytes = 8 * MiB }, used)
    assert.same({ "snap-1", "snap-2" }, { list[1].id, list[2].id })
    assert.same({ count = 1, bytes = 1 * MiB }, (Q.usage(index, "bob")))
  end)

  it("estimates a snapshot before it is taken, and refuses what would not fit, typed", function()
    local record = { project = "p", sandbox = "sandbox", containers = { { service = "sandbox", name = "p-sandbox" } },
      spec = { volumes = { { name = "workspace" } } } }
    assert.equal(12 * MiB, Q.estimate(df, record)) -- the writable layer and the volume
    local quota = { count = 3, bytes = 20 * MiB }
    assert.is_nil(Q.check("alice", { count = 2, bytes = 8 * MiB }, { count = 1, bytes = 12 * MiB }, quota))
    local err = Q.check("alice", { count = 2, bytes = 8 * MiB }, { count = 1, bytes = 13 * MiB }, quota)
    assert.same({ "limit", "snapshot_bytes" }, { err.kind, err.reason })
    assert.truthy(err.message:find("snapshot_quota.bytes", 1, true), err.message)
    err = Q.check("alice", { count = 3, bytes = 0 }, { count = 1, bytes = 0 }, quota)
    assert.same({ "limit", "snapshot_count" }, { err.kind, err.reason })
    assert.is_true(core.is_error(err))
    -- measured after: what is held may equal the quota, never pass it
    assert.is_nil(Q.check("alice", { count = 3, bytes = 20 * MiB }, { count = 0, bytes = 0 }, quota))
  end)

  it("finds what a session owns and what no live session owns, never a kept one", function()
    local index = Q.index(df.Images, df.Volumes, "n1")
    assert.same({ "snap-1" }, Q.owned(index, a1))
    assert.same({}, Q.owned(index, owner("alice", "k1", 101))) -- the key's later life owns none of them
    local alive = { [Q.owner_key("alice", "k1", 100)] = true }
    assert.same({ "snap-3" }, Q.orphans(index, alive, 1000))
    assert.same({ "snap-3", "snap-1" }, Q.orphans(index, {}, 1000)) -- newest first: a child before its base
    assert.same({}, Q.orphans(index, {}, 101)) -- an owner born as `alive` was read may not be in it
  end)
end)

describe("gateway stream caps", function()
  local streams = require "sandstack.gateway.streams"

  it("caps a tenant's and a session's open streams, and gives places back", function()
    local d = dict()
    for _ = 1, 2 do assert.is_true(limits.open_stream(d, "a", "s1", 3, 2)) end
    assert.same({ nil, "session" }, { limits.open_stream(d, "a", "s1", 3, 2) })
    assert.is_true(limits.open_stream(d, "a", "s2", 3, 2))
    assert.same({ nil, "tenant" }, { limits.open_stream(d, "a", "s3", 3, 2) })
    assert.is_true(limits.open_stream(d, "b", "s4", 3, 2)) -- another tenant
    limits.close_stream(d, "a", "s1")
    assert.is_true(limits.open_stream(d, "a", "s3", 3, 2))
    local c = assert(config.check(base()))
    assert.same({ 8, 4 }, { c.max_streams_per_tenant, c.max_streams_per_session })
  end)

  it("polls once per interval for all of a session's streams, and stops when the last leaves", function()
    local timers, calls = {}, 0
    local function timer_at(_, fn) timers[#timers + 1] = fn; return true end
    local function run_timers()
      local now = timers
      timers = {}
      for _, fn in ipairs(now) do fn(false) end
    end
    local fetch = function() calls = calls + 1; return true, { n = calls } end
    local readers = {}
    for i = 1, 5 do readers[i] = streams.join("asks:k.a", 0.5, fetch, timer_at) end
    assert.equal(readers[1], readers[5])
    assert.equal(1, #timers)
    run_timers()
    run_timers()
    assert.equal(2, calls)
    assert.same({ 2, true, 2 }, { readers[1].seq, readers[1].ok, readers[1].value.n })
    for i = 1, 5 do streams.leave(readers[i]) end
    run_timers()
    assert.equal(2, calls)
    assert.same({}, timers)
    assert.equal(0, streams.pollers_open())
    -- a fetch that raises is an answer (false, err), and the poller goes on
    local p = streams.join("audit:k.a", 1, function() error("boom") end, timer_at)
    run_timers()
    assert.is_false(p.ok)
    assert.truthy(p.value.message:find("boom", 1, true))
    assert.equal(1, #timers)
    streams.leave(p)
    run_timers()
    -- no timer to be had: the readers are told, and the next join starts afresh
    p = streams.join("audit:k.b", 1, fetch, function() return nil, "too many pending timers" end)
    assert.same({ false, "busy" }, { p.ok, p.value.kind })
    assert.equal(0, streams.pollers_open())
  end)
end)
