-- sandstack-proxy's policy changed live (docs/proxy.md "Policy changed live"), driven
-- through the binary's own control client (`sandstack-proxy --control VERB`) against a proxy in
-- a network namespace (spec/support/proxy_harness.lua): the swap is atomic (requests racing many
-- swaps are each judged wholly by one of the two policies), tunnels the new policy no longer
-- admits are closed, a refused policy changes nothing, and the socket refuses another user.
-- Runs in every mode: the proxy binary comes from the mode's build directory.
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("sslv")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local in_p, audit = H.in_p, H.audit
local SKIP = H.missing()
local sock

local function compiled(t) return assert(core.policy_compile(t)):render() end

-- A admits GET /a/* on site.test as rule 1; B admits GET /b/* as rule 2 (rule 1 names another host)
local A = compiled { allow = { { host = "site.test", port = 80, methods = { "GET" }, paths = { "/a/*" } },
  { host = "198.51.100.30", port = 9002, raw = true } } }
local B = compiled { allow = { "other.test", { host = "site.test", port = 80, methods = { "GET" }, paths = { "/b/*" } },
  "198.51.100.30:9002" } }

-- sandstack-proxy --control VERB [payload] -> decoded answer, exit code
local function control(verb, payload, as_user) return H.control(sock, verb, payload, as_user) end

local HOSTS = "198.51.100.10 site.test\n198.51.100.10 other.test\n"


describe("sandstack-proxy's policy changed live", function()
  if not H.bring_up(SKIP, function()
    H.net_up("/tmp/sslv-proxy.XXXXXX", HOSTS, { "198.51.100.10", "198.51.100.30" })
    H.make_certs("sslv-test-ca", "site.test", { "site.test" })
    h.must("ip netns exec " .. H.NS_O .. " ip addr add 198.51.100.30/24 dev " .. H.VETH_O .. " 2>/dev/null || true")
    H.start_standin()
    H.wait_standin()
    sock = H.work .. "/ctl/control.sock"
    H.start_proxy("main", 3128, H.base_env("sslv-session", { SANDSTACK_EGRESS_POLICY = A }), { control = sock })
  end) then return end

  it("answers egress with the policy in force and its digest; the socket is 0600 in a 0700 directory", function()
    local a, code = control("egress")
    assert.equal(0, code)
    assert.is_true(a.ok)
    assert.equal(A, a.rendered)
    -- the digest is sha256 of the canonical render, as any tool computes it
    h.write_file(H.work .. "/a.json", A)
    assert.equal(h.must("sha256sum " .. h.q(H.work .. "/a.json")):match("^(%x+)"), a.digest)
    assert.equal("srw-------", h.must("stat -c %A " .. h.q(sock)):gsub("%s+$", ""))
    assert.equal("drwx------", h.must("stat -c %A " .. h.q(H.work .. "/ctl")):gsub("%s+$", ""))
  end)

  it("refuses another user on the socket (the proxy's own user is the control)", function()
    local a, code = control("egress")
    assert.equal(0, code, core.json_encode(a))
    local b, code2 = control("set-egress", B, 65534)
    assert.not_equal(0, code2)
    assert.is_false(b.ok)
    assert.equal("unreachable", b.error)
    assert.equal(A, (control("egress")).rendered)
  end)

  it("a policy it cannot parse is refused (invalid_policy) and the old one stays", function()
    local before = control("egress")
    local r, code = control("set-egress", '{"allow":["ok.test","b..test"]}')
    assert.equal(1, code)
    assert.is_false(r.ok)
    assert.equal("invalid_policy", r.error)
    assert.equal(2, r.rule)
    r = control("set-egress", "not json")
    assert.equal("invalid_policy", r.error)
    r = control("no-such-verb")
    assert.equal("bad_request", r.error)
    local after = control("egress")
    assert.equal(before.digest, after.digest)
    local n = 0
    for _, l in ipairs(audit("main")) do if l.route == "control" then n = n + 1 end end
    assert.equal(0, n, "a refused change wrote an audit line")
  end)

  it("set-credentials: a table it cannot parse, or one this proxy (without a CA) cannot serve, changes nothing", function()
    local secret = "sec-" .. core.random_hex(12)
    local entry = { name = "GH_TOKEN", host = "site.test", port = 443, header = "Authorization", format = "Bearer %s",
      secret = secret, placeholder = ("P"):rep(#secret) }
    local r, code = control("set-credentials", core.json_encode { entry })
    assert.equal(1, code)
    assert.equal("needs_restart", r.error)
    assert.matches("no inspection CA", r.message)
    local short = {}
    for k, v in pairs(entry) do short[k] = v end
    short.secret, short.placeholder = "short", "PPPPP"
    r = control("set-credentials", core.json_encode { short })
    assert.equal("invalid_credentials", r.error)
    r = control("set-credentials", "{")
    assert.equal("invalid_credentials", r.error)
    local out = h.read_file(H.work .. "/main/out") or ""
    assert.falsy(out:find(secret, 1, true), "a secret in the proxy's output")
    assert.falsy(out:find("credentials_changed", 1, true))
    -- an empty table (no credential but the credential route's own) is servable, and audited
    r, code = control("set-credentials", "[]")
    assert.equal(0, code, core.json_encode(r))
    local seen
    for _, l in ipairs(audit("main")) do if l.event == "credentials_changed" then seen = l end end
    assert.truthy(seen)
    assert.equal("control", seen.route)
    assert.equal(r.digest, seen.new_digest)
  end)

  it("closes a raw tunnel once the policy no longer admits it raw; each change is one audit line", function()
    assert.equal(A, (control("egress")).rendered)
    -- a raw tunnel to the hold peer (it answers "hi" and keeps the connection)
    local out_file = H.work .. "/raw-hold"
    h.must(H.client_command("hold", { "198.51.100.30", "30", "9002", "raw" }, { HTTPS_PROXY = H.proxy_url("main") })
      .. " > " .. h.q(out_file) .. " 2>&1 &")
    pcall(h.wait_for, "the tunnel", function() return (h.read_file(out_file) or ""):find("open") end, 20)
    assert.matches("open", h.read_file(out_file) or "")
    local live = (h.read_file(H.work .. "/main/out") or "")
    local r, code = control("set-egress", B)
    assert.equal(0, code, core.json_encode(r))
    assert.is_true(r.ok)
    local ended
    pcall(h.wait_for, "the tunnel's audit line", function()
      for _, l in ipairs(audit("main")) do
        if l.port == 9002 and l["end"] == "policy_changed" then ended = l end
      end
      return ended
    end, 10)
    assert.truthy(ended, "the raw tunnel was not closed by the change: " .. live)
    pcall(h.wait_for, "the tunnel's end", function() return (h.read_file(out_file) or ""):find("eof") end, 10)
    assert.matches("eof", h.read_file(out_file) or "") -- the client saw its tunnel end
    assert.equal(1, r.closed)
    local changes = {}
    for _, l in ipairs(audit("main")) do if l.event == "policy_changed" then changes[#changes + 1] = l end end
    assert.equal(1, #changes)
    assert.equal("policy_changed", changes[1].event)
    assert.equal(r.old_digest, changes[1].old_digest)
    assert.equal(r.digest, changes[1].new_digest)
    assert.not_equal(changes[1].old_digest, changes[1].new_digest)
    assert.equal(B, (control("egress")).rendered)
    assert(control("set-egress", A).ok)
  end)

  it("judges every request racing many swaps wholly by one of the two policies", function()
    local stop = H.work .. "/race.stop"
    local out_file = H.work .. "/race.out"
    h.must(H.client_command("race", { PROXY_IP, "3128", TOKEN, "site.test", "400", stop }) .. " > " .. h.q(out_file)
      .. " 2>" .. h.q(out_file .. ".err") .. " &")
    local swaps = 0
    for i = 1, 60 do
      local r = control("set-egress", i % 2 == 1 and B or A)
      assert.is_true(r.ok, core.json_encode(r))
      swaps = swaps + 1
    end
    h.write_file(stop, "")
    local results
    pcall(h.wait_for, "the race client", function()
      results = core.json_decode(h.read_file(out_file) or "")
      return results
    end, 60)
    assert.truthy(results, "the race client did not finish: " .. tostring(h.read_file(out_file .. ".err")))
    -- by the answer: under A /a is 200 and /b a 403 naming rule 1; under B /a a 403 naming rule 2
    -- and /b 200. Which policy an answer came from is known only by these; a 200 says nothing of
    -- the rule, so the audit line (one per request) is checked too
    local by = { A = 0, B = 0 }
    for _, r in ipairs(results) do
      local a = r.path:sub(1, 3) == "/a/"
      if r.status == 403 then
        assert.truthy((a and r.rule == 2) or (not a and r.rule == 1), core.json_encode(r))
        by[r.rule == 1 and "A" or "B"] = by[r.rule == 1 and "A" or "B"] + 1
      else
        assert.equal(200, r.status, core.json_encode(r))
      end
    end
    -- a line is written when its connection is freed, which may come just after the client saw
    -- its answer end: wait until there is one per answer
    local judged, n
    pcall(h.wait_for, "an audit line per answer", function()
      judged, n = { A = 0, B = 0 }, 0
      for _, l in ipairs(audit("main")) do
        if l.host == "site.test" and l.path and (l.path:find("^/a/") or l.path:find("^/b/")) then
          n = n + 1
          local a = l.path:find("^/a/") ~= nil
          local allow = l.decision == "allow"
          local underA = (a and allow and l.rule == 1) or (not a and not allow and l.rule == 1)
          local underB = (a and not allow and l.rule == 2) or (not a and allow and l.rule == 2)
          assert.truthy(underA ~= underB, "judged by neither or both policies: " .. core.json_encode(l))
          judged[underA and "A" or "B"] = judged[underA and "A" or "B"] + 1
        end
      end
      return n >= #results
    end, 10)
    assert.equal(#results, n)
    assert.truthy(#results >= 400)
    print(("# %d requests raced %d swaps: %d judged by A, %d by B"):format(#results, swaps, judged.A, judged.B))
    assert.truthy(judged.A > 0 and judged.B > 0, "the requests did not race the swaps")
  end)

  -- The one check made after its decision: a CONNECT's resolved address against the rule that
  -- names it (dial.c). P1 admits slow.test and names its private address 10.9.9.9, so the proxy
  -- connects (and fails: no route, a 502); P2 admits slow.test alone, so the address is refused
  -- (403 address_refused). A DNS stand-in holds its answer until the test has swapped P1 for P2:
  -- judged wholly by P1, the CONNECT must end as P1 says. Both outcomes are shown first, unraced.
  it("a CONNECT admitted before a swap has its resolved address judged by the same policy", function()
    local P1 = compiled { allow = { "slow.test:443", "10.9.9.9" } }
    local P2 = compiled { allow = { "slow.test:443" } }
    local d = H.work .. "/dns"
    h.must("mkdir -p " .. h.q(d))
    H.start_peer("live_dns.py", { "127.0.0.1", "slow.test", "10.9.9.9", d }, { inside = true, log = d .. "/dns.log",
      ready = d .. "/dns.ready" })
    local function connect_slow()
      local text = ("CONNECT slow.test:443 HTTP/1.1\\r\\nHost: slow.test:443\\r\\nProxy-Authorization: Basic %s\\r\\n\\r\\n")
        :format(core.base64("sandstack:" .. TOKEN))
      return H.client_command("raw", { PROXY_IP, "3128", text, "10" })
    end
    local function outcome(r) return r.status == 403 and "address_refused" or (r.status >= 500 and "connected" or r.status) end
    -- controls, unraced (the stand-in answers at once)
    h.write_file(d .. "/go", "")
    assert(control("set-egress", P1).ok)
    local r = core.json_decode(h.must(connect_slow()))
    assert.equal("connected", outcome(r), core.json_encode(r))
    assert(control("set-egress", P2).ok)
    r = core.json_decode(h.must(connect_slow()))
    assert.equal("address_refused", outcome(r), core.json_encode(r))
    -- the race: admitted under P1, resolved after P2 is in force
    assert(control("set-egress", P1).ok)
    os.remove(d .. "/go")
    os.remove(d .. "/asked")
    local out = d .. "/raced"
    h.must(connect_slow() .. " > " .. h.q(out) .. " 2>&1 &")
    pcall(h.wait_for, "the proxy's question", function() return h.read_file(d .. "/asked") end, 4, 0.01)
    assert.truthy(h.read_file(d .. "/asked"), "the proxy did not ask the DNS stand-in")
    assert(control("set-egress", P2).ok)
    h.write_file(d .. "/go", "")
    pcall(h.wait_for, "the raced answer", function()
      r = core.json_decode(h.read_file(out) or "")
      return r
    end, 20)
    assert.truthy(r, "no answer: " .. tostring(h.read_file(out)))
    assert.equal("connected", outcome(r), core.json_encode(r))
  end)

  -- The inspection CA is made at start, name-constrained to the hosts the start policy inspects:
  -- a live policy may change the methods and paths of those hosts, and is refused (needs_restart)
  -- when it would inspect another host, whose leaf no client would accept.
  it("refuses a policy that would inspect a host the start CA cannot vouch for (needs_restart)", function()
    local start = compiled { allow = { { host = "site.test", port = 443, methods = { "GET" }, paths = { "/a/*" } } } }
    local csock = H.work .. "/ctl-ca/control.sock"
    H.start_proxy("ca", 3130, H.base_env("sslv-ca", { SANDSTACK_EGRESS_POLICY = start }),
      { ca_dir = true, control = csock })
    local saved = sock
    sock = csock
    local ok_p = compiled { allow = { { host = "site.test", port = 443, methods = { "GET", "POST" }, paths = { "/b/*" } } } }
    local r, code = control("set-egress", ok_p)
    assert.equal(0, code, core.json_encode(r))
    local other = compiled { allow = { "site.test:443", { host = "other.test", methods = { "GET" } } } }
    r, code = control("set-egress", other)
    assert.equal(1, code)
    assert.equal("needs_restart", r.error)
    assert.matches("other.test", r.message)
    assert.equal(ok_p, (control("egress")).rendered)
    -- a wildcard under an inspected host is covered by its DNS subtree; a plain rule needs no CA
    r = control("set-egress", compiled { allow = { { host = "*.site.test", methods = { "GET" } }, "elsewhere.test" } })
    assert.is_true(r.ok, core.json_encode(r))
    sock = saved
  end)

  -- The model key of the credential route, replaced live (a warm pool's stack waits
  -- with a throwaway key and gets its session's at claim). The set-credentials table may carry
  -- { name = "ANTHROPIC_API_KEY", secret = KEY } and nothing else in that entry; the
  -- placeholder stays the session token the sandbox holds. The model stand-in
  -- (spec/support/model_standin.py) records the key each request brought.
  it("replaces the credential route's model key live; a bad one is refused and the key in force stays", function()
    local mdir = H.work .. "/model-standin"
    h.must("mkdir -p " .. h.q(mdir))
    H.start_peer("model_standin.py", { "198.51.100.30", "9100", mdir },
      { log = mdir .. "/log", ready = mdir .. "/model.ready" })
    local msock = H.work .. "/ctl-model/control.sock"
    H.start_proxy("model", 3131, H.base_env("sslv-model", { SANDSTACK_UPSTREAM = "http://198.51.100.30:9100",
      SANDSTACK_EGRESS_POLICY = compiled { allow = { "198.51.100.30:9100" } } }), { control = msock })
    local saved = sock
    sock = msock
    -- the x-api-key the stand-in got for one request on the credential route, carrying the token
    local n = 0
    local function key_sent()
      n = n + 1
      local out = h.must(in_p("curl -sS --max-time 10 -H 'x-api-key: " .. TOKEN .. "' http://" .. PROXY_IP
        .. ":3131/v1/messages/" .. n))
      assert.matches('"ok": true', out)
      local last
      for line in (h.read_file(mdir .. "/requests.jsonl") or ""):gmatch("[^\n]+") do last = core.json_decode(line) end
      assert.equal("/v1/messages/" .. n, last.path)
      return last.headers["x-api-key"][1]
    end
    assert.equal(H.KEY, key_sent()) -- the control: the start key
    local session_key = "sk-session-" .. core.random_hex(16)
    local r, code = control("set-credentials", core.json_encode { { name = "ANTHROPIC_API_KEY", secret = session_key } })
    assert.equal(0, code, core.json_encode(r))
    assert.equal(session_key, key_sent())
    -- refused, and the key in force stays: another field in the entry, too short, a space, twice
    for _, bad in ipairs {
      { { name = "ANTHROPIC_API_KEY", secret = "sk-other-" .. core.random_hex(16), host = "198.51.100.30" } },
      { { name = "ANTHROPIC_API_KEY", secret = "sk-short" } },
      { { name = "ANTHROPIC_API_KEY", secret = "sk-with space-" .. core.random_hex(8) } },
      { { name = "ANTHROPIC_API_KEY", secret = "sk-one-" .. core.random_hex(16) },
        { name = "ANTHROPIC_API_KEY", secret = "sk-two-" .. core.random_hex(16) } },
    } do
      r, code = control("set-credentials", core.json_encode(bad))
      assert.equal(1, code, core.json_encode(r))
      assert.equal("invalid_credentials", r.error)
      assert.falsy(core.json_encode(r):find(bad[1].secret, 1, true), "a refusal echoed the key")
    end
    assert.equal(session_key, key_sent())
    -- a table without the entry keeps the key in force (not the start key)
    r, code = control("set-credentials", "[]")
    assert.equal(0, code, core.json_encode(r))
    assert.equal(session_key, key_sent())
    -- set-model-key: the key alone (the other credentials stay), under the same rule
    for _, bad in ipairs { "sk-short", "sk-with space-" .. core.random_hex(8) } do
      r, code = control("set-model-key", bad)
      assert.equal(1, code, core.json_encode(r))
      assert.equal("invalid_credentials", r.error)
    end
    assert.equal(session_key, key_sent())
    local next_key = "sk-next-" .. core.random_hex(20)
    r, code = control("set-model-key", next_key)
    assert.equal(0, code, core.json_encode(r))
    assert.equal(next_key, key_sent())
    -- the token never reached the stand-in; the key is in no output of the proxy; the changes are
    -- audited as credentials_changed saying whether the model key changed, never what it is
    local reqs = h.read_file(mdir .. "/requests.jsonl") or ""
    assert.falsy(reqs:find(TOKEN, 1, true))
    local logs = (h.read_file(H.work .. "/model/out") or "") .. (h.read_file(H.work .. "/model/err") or "")
    assert.falsy(logs:find(session_key, 1, true), "the session's key in the proxy's output")
    assert.falsy(logs:find(next_key, 1, true), "the key in the proxy's output")
    local changes = {}
    for _, l in ipairs(audit("model")) do
      if l.event == "credentials_changed" then changes[#changes + 1] = l.model_key end
    end
    assert.same({ true, false, true }, changes)
    sock = saved
  end)
end)
