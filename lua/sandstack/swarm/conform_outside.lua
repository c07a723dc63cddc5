-- The outside of `sandstack conform --backend swarm` (internal to sandstack.swarm.conform): the
-- internet stand-in in the network namespace of the node that holds the reference stack, set
-- up through that node's own Engine API (sandstack.standin's node form: a container on the
-- node's host network), and the credentials probe against it. A task egresses from its own
-- node (the node's docker_gwbridge and NAT), so the stand-in must answer there: the probes run
-- on every node the run places a stack on, from any machine that reaches the nodes' engines.
local core = require "sandstack.core"
local C = require "sandstack.conformance_probes"
local cluster = require "sandstack.swarm.cluster"
local standin = require "sandstack.standin"

local M = {}

M.HOST = "conform.test" -- the credential's host: the proxy maps it to the stand-in's address
M.CRED = "CONFORM_TOKEN" -- the sandbox's variable for the credential's placeholder

local function sh(cmd)
  local p = io.popen("(" .. cmd .. ") 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local function text(err) return type(err) == "table" and err.message or tostring(err) end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- A CA and a certificate for M.HOST signed by it, made with the openssl command: { ca =, cert =,
-- key = } (PEM texts), or nil and why. Made once per run; the files are removed at once.
function M.certs()
  local ok, dir = sh("mktemp -d /tmp/sandstack-conform.XXXXXX")
  dir = ok and dir:match("^(/tmp/sandstack%-conform%.%w+)")
  if not dir then return nil, "no temporary directory: " .. tostring(dir) end
  local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  local out
  ok, out = sh(("cd %s && openssl req -x509 %s -keyout ca.key -out ca.pem -days 1 -subj /CN=sandstack-conform-ca"
    .. " && openssl req %s -keyout srv.key -out srv.csr -subj /CN=%s && printf 'subjectAltName=DNS:%s\\n' >ext"
    .. " && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 1 -extfile ext")
    :format(q(dir), ec, ec, M.HOST, M.HOST))
  local res
  if ok then
    local function read(f)
      local h = io.open(dir .. "/" .. f, "rb")
      if not h then return nil end
      local s = h:read("a")
      h:close()
      return s
    end
    res = { ca = read("ca.pem"), cert = read("srv.pem"), key = read("srv.key") }
  end
  sh("rm -rf " .. q(dir))
  if not (res and res.ca and res.cert and res.key) then
    return nil, "the openssl command could not make the stand-in's certificate: " .. tostring(out):gsub("%s+$", "")
  end
  return res
end

-- The stand-in on the node of eng: its container's name, or nil and why (a reason code and a
-- sentence, for the skip). tls: M.certs()'s answer or nil.
function M.up(eng, project, image, tls)
  local name = project .. "-standin"
  local ifname = "si" .. core.random_hex(3):lower() -- the node's end of the veth, <= 15 bytes with its peer's "p"
  local body = standin.node_body(image, C.STANDIN_PORT, ifname,
    { ["io.sandstack.project"] = project, ["io.sandstack.role"] = "conform-standin" }, tls)
  local ok, err = cluster.op(eng, "create_container", name, { body = body })
  if not ok then
    return nil, "standin_refused", "the node's engine refused the stand-in's container (its host network with "
      .. "NET_ADMIN and SYS_ADMIN, image " .. tostring(image) .. "): " .. text(err)
  end
  ok, err = cluster.op(eng, "start", name)
  if ok then
    for _ = 1, 150 do
      local r = eng:exec(name, { "cat", "/tmp/ready" }, { timeout = 10 })
      if r and r.exit_code == 0 then return name end
      local info = cluster.op(eng, "inspect", name)
      if type(info) == "table" and info.State and info.State.Running == false then break end
      core.sleep(0.1)
    end
    local info = cluster.op(eng, "inspect", name)
    local st = type(info) == "table" and info.State or {}
    err = ("the stand-in did not answer on %s:%d (container %s, exit code %s)"):format(C.STANDIN_ADDR,
      C.STANDIN_PORT, tostring(st.Status), tostring(st.ExitCode))
  end
  M.down(eng, name)
  return nil, "standin_failed", "the stand-in could not be set up on the node (its image needs busybox's ip, "
    .. "unshare, nsenter and nc, and socat): " .. text(err)
end

-- Removes the stand-in: its veth first (the node's end; its peer goes with it), then the container.
function M.down(eng, name)
  if not name then return end
  eng:exec(name, { "sh", "-c", 'ip link del "$(cat /tmp/hif)" 2>/dev/null' }, { timeout = 10 })
  cluster.op(eng, "remove_container", name)
end

-- The address of a service's task on one of the stack's overlays (from the manager).
function M.task_address(mgr, project, service, network)
  for _, tk in ipairs(cluster.tasks(mgr, { project .. "-" .. service }) or {}) do
    for _, na in ipairs(tk.DesiredState == "running" and tk.NetworksAttachments or {}) do
      if na.Network.Spec.Name == project .. "-" .. network then return (na.Addresses[1]:match("^([%d.]+)")) end
    end
  end
end

-- The stack options of the credentials probe, added to the reference stack's: the secret for
-- M.HOST, an egress policy admitting it (so sandstack adds its proxy, which inspects that host),
-- the host mapped to the stand-in's address, and the stand-in's CA for the proxy's upstreams.
function M.credential_opts(so, tls, secret)
  so.api_key = "sk-conform-" .. core.random_hex(16)
  so.egress_policy = { allow = { M.HOST } }
  so.proxy_hosts = { [M.HOST] = C.STANDIN_ADDR }
  so.proxy_upstream_ca = tls.ca
  so.credentials = { { name = M.CRED, host = M.HOST, header = "Authorization", format = "Bearer %s", secret = secret } }
end

-- What the client sends from the sandbox's network namespace: a CONNECT to M.HOST through the
-- sandbox's proxy (socat's PROXY address, on a loopback port), then TLS through it, trusting only
-- the stack's CA (as the sandbox's clients do), with the placeholder where the credential goes.
local CLIENT = [=[
printf '%s\n' "$CA" >/tmp/ca.pem
socat TCP-LISTEN:47011,bind=127.0.0.1,fork,reuseaddr "PROXY:$PX:$HOST:443,proxyport=$PP,proxyauth=$AUTH" &
for _ in $(seq 1 100); do netstat -ltn 2>/dev/null | grep -q ':47011 ' && break; sleep 0.05; done
printf 'GET /conform HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$HOST" "$PH" \
  | socat -t 10 -T 20 - "OPENSSL:127.0.0.1:47011,cafile=/tmp/ca.pem,commonname=$HOST,snihost=$HOST"
echo "exit=$?"
kill $! 2>/dev/null
]=]

-- The credentials probe on the node: the sandbox holds the placeholder, a request it sends
-- with it reaches the stand-in carrying the secret, and the secret is nowhere the sandbox can
-- read (its environment, its service's spec, the record, the answer it gets back).
function M.credentials(t, eng, mgr, stack, ids, standin_name, image, secret)
  local ph = (stack:credentials() or {})[M.CRED]
  local env = eng:exec(ids.sandbox, { "sh", "-c", "env; tr '\\0' '\\n' </proc/1/environ" }, { timeout = 20 })
  env = env and env.stdout or ""
  local proxy_url = env:match("\nHTTPS_PROXY=([^\n]+)") or env:match("^HTTPS_PROXY=([^\n]+)")
  local auth, px_name, px_port = tostring(proxy_url):match("^http://([^@/]+)@([%w%-_.]+):(%d+)")
  -- the stack's CA, beside the bundle the sandbox's clients trust (the bundle, with the image's
  -- roots, is more than one environment string may hold)
  local bundle = eng:exec(ids.sandbox, { "sh", "-c", 'cat "$(dirname "$SSL_CERT_FILE")/ca.pem"' }, { timeout = 20 })
  local px_ip = px_name and M.task_address(mgr, stack.project, px_name, "sbx")
  if not (ph and #ph == #secret and env:find(M.CRED .. "=" .. ph .. "\n", 1, true) and px_ip and bundle
      and bundle.exit_code == 0) then
    t.result(false, "credentials: the sandbox holds the credential's placeholder and its proxy's address",
      ("placeholder %s, proxy %s at %s, CA bundle %s"):format(ph and "known" or "missing", tostring(px_name),
        tostring(px_ip), bundle and bundle.exit_code == 0 and "read" or "unreadable"))
    return
  end
  -- the client joins the sandbox's network namespace: the sandbox's image needs no TLS client
  local name = stack.project .. "-credclient"
  local body = { Image = image, Entrypoint = { "sh", "-c", "sleep 300" },
    Labels = { ["io.sandstack.project"] = stack.project, ["io.sandstack.role"] = "conform-client" },
    HostConfig = { NetworkMode = "container:" .. ids.sandbox, CapDrop = { "ALL" }, SecurityOpt = { "no-new-privileges" },
      RestartPolicy = { Name = "no" } } }
  local ok, err = cluster.op(eng, "create_container", name, { body = body })
  if ok then ok, err = cluster.op(eng, "start", name) end
  local res
  if ok then
    res, err = eng:exec(name, { "sh", "-c", CLIENT }, { timeout = 60, env = { "CA=" .. bundle.stdout, "PX=" .. px_ip,
      "PP=" .. px_port, "AUTH=" .. auth, "HOST=" .. M.HOST, "PH=" .. ph } })
  end
  cluster.op(eng, "remove_container", name)
  local answer = res and res.stdout or ("the client did not run: " .. tostring(err))
  local client_err = res and res.stderr or ""
  local got = eng:exec(standin_name, { "sh", "-c", "cat /tmp/requests.log 2>/dev/null" }, { timeout = 20 })
  got = got and got.stdout or ""
  t.result(got:find("GET /conform HTTP/1.1\n", 1, true) and got:find("Authorization: Bearer " .. secret .. "\n", 1, true)
      and answer:find(" 200 ", 1, true) and true,
    "credentials: the sandbox's request reaches the stand-in on its node with the secret in place of the placeholder",
    "the stand-in received:\n" .. got .. "\nthe client read:\n" .. answer .. "\nits errors:\n" .. client_err)
  local spec = core.json_encode(cluster.op(mgr, "inspect_service", stack.project .. "-sandbox") or {})
  local where = {}
  if env:find(secret, 1, true) then where[#where + 1] = "its environment" end
  if spec:find(secret, 1, true) then where[#where + 1] = "its service's spec" end
  if core.json_encode(stack:record()):find(secret, 1, true) then where[#where + 1] = "the record" end
  if answer:find(secret, 1, true) then where[#where + 1] = "the answer it read" end
  -- the control: the answer is the stand-in's echo of the request, placeholder and all
  if not answer:find("Bearer " .. ph, 1, true) then where[#where + 1] = "(control: the echoed placeholder is not in the answer)" end
  t.result(#where == 0, "credentials: the sandbox never holds the secret (environment, service spec, record, answer)",
    table.concat(where, ", "))
end

return M
