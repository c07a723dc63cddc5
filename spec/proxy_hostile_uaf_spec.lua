-- The inspected request the origin receives is exactly the one the proxy checked.
-- The attack: an inspected CONNECT whose request head and body (separate TLS records) reach the
-- proxy in one read while the origin's TLS handshake is still pending. Before the fix, the body
-- bytes grew the buffer the parsed head pointed into, and the head sent on was built from freed
-- memory: the origin got a request the policy never saw (another connection's, or heap bytes),
-- and the ASan build aborted. The interleaving is made certain, whatever the machine's load: the
-- origin holds back its handshake until every client of a round has sent its request (the
-- clients leave a mark, the spec then lets the origin go). Denied requests ("POST /ad") run
-- beside the admitted ones, so freed memory holds their heads; MALLOC_PERTURB_ makes glibc fill
-- freed memory in the release build too. The origin records every request it gets; each must
-- be exactly what an audit line admitted. As spec/proxy_inspect_spec.lua: two network
-- namespaces, a test CA the proxy trusts through SANDSTACK_UPSTREAM_CA, the clients trusting the
-- proxy's bundle. Needs root and ip(8).
local h = require "helpers"
local core = require "sandstack.core"

local ph = require "proxy_harness"
local H = ph.new("ssu1")
local TOKEN, PROXY_IP = H.TOKEN, H.PROXY_IP
local audit, proxies = H.audit, H.proxies
local work

local SKIP = H.missing { { "test -r /etc/ssl/certs/ca-certificates.crt", "needs the system CA bundle" } }

local POLICY = { { host = "slow.test", methods = { "POST" }, paths = { "/up" } } } -- inspected: POST /up only

local function setup()
  work = H.net_up("/tmp/ssu1-uaf.XXXXXX", "198.51.100.10 slow.test\n", { "198.51.100.10" })
  H.make_certs("ssu1-test-ca", "slow.test", { "slow.test" })
  -- the origin holds back its handshake until work/go exists (spec/support/held_origin.py)
  H.start_peer("held_origin.py", { work .. "/srv.pem", work .. "/srv.key", work .. "/origin.log",
    work .. "/origin.ready", work .. "/go" }, { ready = work .. "/origin.ready" })
  H.start_proxy("main", 3128, H.base_env("ssu1-session", {
    SANDSTACK_EGRESS_POLICY = assert(core.policy_compile { allow = POLICY }):render(),
    SANDSTACK_UPSTREAM_CA = h.read_file(work .. "/ca.pem"),
    MALLOC_PERTURB_ = "165" }), { ca_dir = true }) -- glibc fills freed memory (ASan ignores it)
end

-- runs the hostile clients (proxy_client.py's split_records: CONNECT, TLS through memory BIOs
-- so the record boundaries are ours, the head and the body as separate records in ONE send) in
-- parallel and lets the origin handshake once each has sent its request (or given up); returns
-- their JSON results in the order given
local function run_clients(list)
  local d = h.q(work)
  local cmds, marks = { "rm -f " .. d .. "/go " .. d .. "/mark.*;" }, {}
  for i, c in ipairs(list) do
    cmds[#cmds + 1] = H.client_command("split_records", { PROXY_IP, proxies.main.port, "slow.test:443",
      proxies.main.ca .. "/bundle.pem", TOKEN, c[1], c[2], c[3], work .. "/mark." .. i }) .. " >" .. d .. "/client" .. i
      .. ".out 2>&1 &"
    marks[#marks + 1] = "[ -f " .. d .. "/mark." .. i .. " ]"
  end
  cmds[#cmds + 1] = "for i in $(seq 600); do " .. table.concat(marks, " && ") .. " && break; sleep 0.05; done; touch " .. d
    .. "/go; wait"
  h.must(table.concat(cmds, " "))
  local results = {}
  for i = 1, #list do
    local text = h.read_file(work .. "/client" .. i .. ".out") or ""
    results[i] = assert(core.json_decode(text:match("([^\n]+)%s*$") or ""), text)
  end
  return results
end

local function origin_log()
  local recs = {}
  for line in (h.read_file(work .. "/origin.log") or ""):gmatch("[^\n]+") do recs[#recs + 1] = core.json_decode(line) end
  return recs
end

describe("sandstack-proxy, hostile clients: an inspected request sends exactly what was checked", function()
  if not H.bring_up(SKIP, setup) then return end

  it("head and body in one read while the origin's handshake is pending: the origin gets exactly POST /up and its body", function()
    -- control: the denied request is refused, and an admitted one with a small body goes through
    local list = { { "POST", "/ad", 100 }, { "POST", "/up", 100 } }
    local results = run_clients(list)
    assert.equal(403, results[1].status, results[1].error or results[1].reply)
    assert.equal(200, results[2].status, results[2].error or results[2].reply)
    -- the attack: big bodies (the buffer would grow several times after the head was parsed),
    -- beside denied requests whose heads freed memory may then hold
    local more = { { "POST", "/up", 40997 }, { "POST", "/ad", 300 }, { "POST", "/up", 30001 }, { "POST", "/ad", 20000 },
      { "POST", "/up", 65000 }, { "POST", "/ad", 5000 } }
    for i, r in ipairs(run_clients(more)) do
      list[#list + 1], results[#results + 1] = more[i], r
    end
    h.must("sleep 0.3") -- the last origin and audit lines
    local sent, admitted = {}, 0
    for i, c in ipairs(list) do
      if c[2] == "/up" then
        sent[results[i].sha], admitted = true, admitted + 1
      end
    end
    -- every request the origin got is exactly an admitted one: request line, and a body a client
    -- sent with it; a denied request never reaches it (its connections end before a request)
    local got = 0
    for _, rec in ipairs(origin_log()) do
      if rec.line ~= "" or rec.body_len then
        got = got + 1
        assert.equal("POST /up HTTP/1.1", rec.line)
        assert.is_true(rec.clean, rec.line)
        assert.is_nil(rec.error, rec.error)
        assert.is_true(sent[rec.body_sha], "the origin got a body no client sent (" .. tostring(rec.body_len) .. " bytes)")
        sent[rec.body_sha] = nil -- and each once
      end
    end
    assert.equal(admitted, got, h.read_file(work .. "/origin.log"))
    -- each client got the answer its request deserved
    for i, c in ipairs(list) do
      local want = c[2] == "/up" and 200 or 403
      assert.equal(want, results[i].status, ("client %d (%s %s): %s"):format(i, c[1], c[2], results[i].error or results[i].reply))
    end
    -- and the audit lines say the same: the admitted ones are POST /up, the denied ones POST /ad
    local allow, deny = 0, 0
    for _, l in ipairs(audit("main")) do
      if l.kind == "inspect" and l.decision == "allow" then
        allow = allow + 1
        assert.equal("POST", l.method)
        assert.equal("/up", l.path)
      elseif l.kind == "inspect" and l.decision == "deny" then
        deny = deny + 1
        assert.equal("/ad", l.path)
      end
    end
    assert.equal(admitted, allow)
    assert.equal(#list - admitted, deny)
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    H.stop_clean("main")
  end)
end)
