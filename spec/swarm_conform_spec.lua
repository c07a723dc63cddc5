-- The outside of `sandstack conform --backend swarm`, without a cluster (every mode): the
-- stand-in's container on a node (what it is given and what not), the typed reasons a node's
-- engine gives for a skip, the credentials probe's certificate and stack options. The live run on
-- three nodes is spec/swarm_cluster_spec.lua's.
local standin = require "sandstack.standin"
local O = require "sandstack.swarm.conform_outside"
local C = require "sandstack.conformance"
local core = require "sandstack.core"
local h = require "helpers"

-- An engine client whose every request gets the same answer (cluster.op's view of eng:perform).
local function engine(answer)
  local e = { sent = {} }
  function e.perform(_, reqs)
    for _, r in ipairs(reqs) do e.sent[#e.sent + 1] = r end
    return { answer }
  end
  function e.exec() return nil, "no exec here" end
  return e
end

describe("sandstack.swarm conform: the stand-in on a node", function()
  it("is a container on the node's host network with three capabilities, not privileged", function()
    local b = standin.node_body("img:1", 8099, "siabc123", { ["io.sandstack.project"] = "p" })
    assert.equal("host", b.HostConfig.NetworkMode)
    assert.same({ "ALL" }, b.HostConfig.CapDrop)
    assert.same({ "NET_ADMIN", "SYS_ADMIN", "NET_BIND_SERVICE" }, b.HostConfig.CapAdd)
    assert.is_nil(b.HostConfig.Privileged)
    assert.same({ "no-new-privileges" }, b.HostConfig.SecurityOpt)
    assert.same({ "8099", "siabc123" }, b.Cmd)
    assert.equal(standin.node_script, b.Entrypoint[3])
    assert.same({}, b.Env) -- no TLS listener unless asked
    assert.equal("p", b.Labels["io.sandstack.project"])
    local t = standin.node_body("img:1", 8099, "x", {}, { cert = "C", key = "K" })
    assert.same({ "STANDIN_CERT=C", "STANDIN_KEY=K" }, t.Env)
  end)

  it("is a script busybox's sh reads, listening at the address the probes aim at", function()
    local _, ok = h.sh("sh -n -c " .. h.q(standin.node_script))
    assert.is_true(ok)
    assert.truthy(standin.node_script:find("198.51.100.2/30", 1, true))
    assert.equal(standin.ADDR, C.STANDIN_ADDR)
  end)

  it("names why when the node's engine refuses it, and removes what it made", function()
    local eng = engine { ok = false, status = 403, err = { message = "authorization denied by plugin" } }
    local name, code, why = O.up(eng, "sandstack-conform-ab12", "img:1", nil)
    assert.is_nil(name)
    assert.equal("standin_refused", code)
    assert.truthy(why:find("authorization denied by plugin", 1, true), why)
    assert.truthy(why:find("NET_ADMIN", 1, true), why)
    -- a container that starts but never answers is removed again
    local started = engine { ok = true, status = 204, body = {} }
    started.exec = function() return { exit_code = 1, stdout = "", stderr = "" } end
    local n2 = 0
    started.perform = function(self, reqs)
      n2 = n2 + 1
      for _, r in ipairs(reqs) do self.sent[#self.sent + 1] = r end
      -- create, start, then inspect reports it exited
      return { { ok = true, status = 200, body = { State = { Running = false, Status = "exited", ExitCode = 2 } } } }
    end
    name, code, why = O.up(started, "sandstack-conform-ab12", "img:1", nil)
    assert.is_nil(name)
    assert.equal("standin_failed", code)
    assert.truthy(why:find("exit code 2", 1, true), why)
    local last = started.sent[#started.sent]
    assert.equal("DELETE", last.method)
    assert.truthy(last.path:find("sandstack-conform-ab12-standin", 1, true), last.path)
    assert.truthy(n2 >= 3)
  end)
end)

describe("sandstack.swarm conform: the credentials probe", function()
  it("makes a CA and a certificate for its host", function()
    if not select(2, h.sh("command -v openssl")) then return pending("no openssl command") end
    local tls = assert(O.certs())
    local dir = h.must("mktemp -d /tmp/sstest-swconf.XXXXXX"):match("%S+")
    h.write_file(dir .. "/ca.pem", tls.ca)
    h.write_file(dir .. "/srv.pem", tls.cert)
    local out, ok = h.sh(("cd %s && openssl verify -CAfile ca.pem -verify_hostname %s srv.pem"):format(h.q(dir), O.HOST))
    h.sh("rm -rf " .. h.q(dir))
    assert.is_true(ok, out)
    assert.truthy(tls.key:find("PRIVATE KEY", 1, true))
  end)

  it("adds options a swarm start accepts, the secret only for the proxy", function()
    local so = C.stack_opts { project = "sandstack-conform-cd34" }
    so.pull, so.subnet_pool, so.runtime = nil, nil, nil
    local secret = "cf_" .. core.random_hex(20)
    O.credential_opts(so, { ca = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n" }, secret)
    assert.equal(C.STANDIN_ADDR, so.proxy_hosts[O.HOST])
    local plan, err = require("sandstack.swarm").plan("sandstack-conform-cd34", so)
    assert.truthy(plan, tostring(err))
    local text = core.json_encode(plan)
    assert.truthy(text:find(O.CRED .. "=", 1, true), "the sandbox gets the placeholder's variable")
    assert.is_nil(text:find(secret, 1, true), "a shown plan holds no secret")
  end)
end)
