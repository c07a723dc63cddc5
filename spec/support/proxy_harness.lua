-- The network-namespace test bed shared by spec/proxy_core_spec.lua and spec/proxy_inspect_spec.lua:
-- two namespaces joined by a veth pair, "<prefix>p*" holding the proxy and the clients (its
-- /etc/hosts is /etc/netns/<ns>/hosts, which `ip netns exec` mounts over /etc/hosts) and
-- "<prefix>o*" the outside in 198.51.100.0/24; a test CA made with openssl; sandstack-proxy
-- instances started from the mode's build directory and ended by pid.
--
--   local H = require("proxy_harness").new("ssh2")
--   local SKIP = H.missing()                 -- nil, or why the spec cannot run here
--   H.net_up("/tmp/ssh2-proxy.XXXXXX", HOSTS, { "198.51.100.10" })  -> work directory
--   H.make_certs("ssh2-test-ca", "allowed.test", { "allowed.test", ... }, more_shell)
--   H.start_standin(); H.start_proxy("main", 3128, env); H.teardown()
--   describe(..., function() if not H.bring_up(SKIP, setup) then return end ... end)
local h = require "helpers"
local core = require "sandstack.core"

local M = {}

-- in dir: ca.pem/ca.key (a test CA, CN ca_cn) and srv.pem/srv.key (CN server_cn, for the given
-- DNS names), then the shell in `more` (further certificates), run in dir
function M.make_certs(dir, ca_cn, server_cn, names, more)
  local san = {}
  for i, n in ipairs(names) do san[i] = "DNS:" .. n end
  h.must(("cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=%s 2>&1"
    .. " && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=%s 2>&1"
    .. " && printf 'subjectAltName=%s\\n' > ext"
    .. " && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext 2>&1")
    :format(h.q(dir), ca_cn, server_cn, table.concat(san, ",")) .. (more or ""))
end

function M.new(prefix)
  local sfx = core.random_hex(3)
  local build = package.cpath:match("^%.?/?([^;]-)/%?%.so") or "build"
  local H = {
    PROXY = build .. "/sandstack-proxy",
    TOKEN = "tok-" .. core.random_hex(16),
    KEY = "sk-real-" .. core.random_hex(16),
    NS_P = prefix .. "p" .. sfx, NS_O = prefix .. "o" .. sfx,
    VETH_P = prefix .. "a" .. sfx, VETH_O = prefix .. "b" .. sfx,
    PROXY_IP = "198.51.100.1",
    top = (h.must("pwd"):gsub("%s+$", "")),
    proxies = {},
    work = nil,
  }

  function H.in_p(cmd) return "ip netns exec " .. H.NS_P .. " " .. cmd end
  function H.in_o(cmd) return "ip netns exec " .. H.NS_O .. " " .. cmd end

  -- extra: further { shell test, reason } pairs the spec needs
  function H.missing(extra)
    if h.must("id -u"):gsub("%s", "") ~= "0" then return "needs root (network namespaces)" end
    for _, tool in ipairs { "ip", "openssl", "curl", "python3" } do
      if not select(2, h.sh("command -v " .. tool)) then return "needs " .. tool end
    end
    if not select(2, h.sh("test -x " .. h.q(H.PROXY))) then return "no " .. H.PROXY .. " (build the sandstack-proxy target)" end
    for _, check in ipairs(extra or {}) do
      if not select(2, h.sh(check[1])) then return check[2] end
    end
    return nil
  end

  -- a fresh work directory, both namespaces, the veth pair with the proxy's address on one end
  -- and outside_addrs on the other, and the proxy side's hosts and resolv.conf
  function H.net_up(template, hosts, outside_addrs)
    H.work = h.must("mktemp -d " .. template):gsub("%s+$", "")
    local in_p, in_o = H.in_p, H.in_o
    h.must("ip netns add " .. H.NS_P .. " && ip netns add " .. H.NS_O)
    h.must(("ip link add %s netns %s type veth peer name %s netns %s"):format(H.VETH_P, H.NS_P, H.VETH_O, H.NS_O))
    h.must(in_p("ip addr add " .. H.PROXY_IP .. "/24 dev " .. H.VETH_P) .. " && " .. in_p("ip link set " .. H.VETH_P .. " up")
      .. " && " .. in_p("ip link set lo up"))
    h.must(in_o("ip link set " .. H.VETH_O .. " up") .. " && " .. in_o("ip link set lo up"))
    for _, a in ipairs(outside_addrs) do
      h.must(in_o("ip addr add " .. a .. "/24 dev " .. H.VETH_O))
    end
    h.must("mkdir -p /etc/netns/" .. H.NS_P)
    h.write_file("/etc/netns/" .. H.NS_P .. "/hosts", "127.0.0.1 localhost\n" .. hosts)
    h.write_file("/etc/netns/" .. H.NS_P .. "/resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return H.work
  end

  -- M.make_certs in the work directory
  function H.make_certs(ca_cn, server_cn, names, more) M.make_certs(H.work, ca_cn, server_cn, names, more) end

  -- spec/support/proxy_standin.py in the outside namespace, serving with srv.pem
  function H.start_standin()
    local d = h.q(H.work)
    h.must(H.in_o("setsid python3 " .. h.q(H.top .. "/spec/support/proxy_standin.py") .. " " .. d .. "/srv.pem " .. d
      .. "/srv.key " .. d) .. " </dev/null >" .. d .. "/standin.log 2>&1 &")
  end

  function H.wait_standin()
    local d = h.q(H.work)
    h.must("for i in $(seq 100); do [ -f " .. d .. "/standin.ready ] && break; sleep 0.05; done; [ -f " .. d .. "/standin.ready ]")
  end

  -- the environment every proxy of a spec shares; fields of extra are added
  function H.base_env(session, extra)
    local env = { SANDSTACK_SESSION_TOKEN = H.TOKEN, ANTHROPIC_API_KEY = H.KEY,
      SANDSTACK_UPSTREAM = "https://model.test:8443", SANDSTACK_SESSION = session,
      ASAN_OPTIONS = "detect_leaks=1:exitcode=23",
      LSAN_OPTIONS = "suppressions=" .. H.top .. "/spec/support/lsan.supp:print_suppressions=0" }
    for k, v in pairs(extra or {}) do env[k] = v end
    return env
  end

  -- opts.raise_nofile: lift the soft open-file limit to the hard one first;
  -- opts.ca_dir: give the proxy <dir>/ca as SANDSTACK_CA_DIR (p.ca)
  function H.start_proxy(name, port, env, opts)
    opts = opts or {}
    local dir = H.work .. "/" .. name
    h.must("mkdir -p " .. h.q(opts.ca_dir and dir .. "/ca" or dir))
    local vars = {}
    for k, v in pairs(env) do vars[#vars + 1] = k .. "=" .. h.q(v) end
    if opts.ca_dir then vars[#vars + 1] = "SANDSTACK_CA_DIR=" .. h.q(dir .. "/ca") end
    local lines = {}
    if opts.raise_nofile then lines[#lines + 1] = "ulimit -n $(ulimit -Hn)" end
    lines[#lines + 1] = "echo $$ > " .. h.q(dir .. "/pid")
    lines[#lines + 1] = "exec env " .. table.concat(vars, " ") .. " " .. h.q(H.top .. "/" .. H.PROXY) .. " --listen " .. H.PROXY_IP
      .. " --port " .. port .. " >" .. h.q(dir .. "/out") .. " 2>" .. h.q(dir .. "/err")
    h.write_file(dir .. "/run.sh", table.concat(lines, "\n") .. "\n")
    h.must(H.in_p("setsid sh " .. h.q(dir .. "/run.sh")) .. " </dev/null >/dev/null 2>&1 &")
    local p = { dir = dir, port = port, ca = opts.ca_dir and dir .. "/ca" or nil }
    for _ = 1, 100 do
      local out = h.read_file(dir .. "/out") or ""
      if out:find('"event":"listening"', 1, true) then
        p.pid = tonumber((h.read_file(dir .. "/pid") or ""):match("%d+"))
        H.proxies[name] = p
        return p
      end
      h.sh("sleep 0.05")
    end
    error("proxy " .. name .. " did not start: " .. (h.read_file(dir .. "/err") or ""))
  end

  function H.proxy_url(name, token)
    return ("http://sandstack:%s@%s:%d"):format(token or H.TOKEN, H.PROXY_IP, H.proxies[name].port)
  end

  -- the proxy's audit lines (those with a decision), in order
  function H.audit(name)
    local lines = {}
    for line in (h.read_file(H.proxies[name].dir .. "/out") or ""):gmatch("[^\n]+") do
      local v = core.json_decode(line)
      if v and v.decision then lines[#lines + 1] = v end
    end
    return lines
  end

  -- SIGTERM to the named proxy, waited for (10 s); then its stderr, which must hold no sanitizer
  -- report (ASan, LSan, UBSan's "runtime error") for the caller to assert on
  function H.stop(name)
    local p = H.proxies[name]
    h.must("kill -TERM " .. p.pid)
    h.must("for i in $(seq 100); do kill -0 " .. p.pid .. " 2>/dev/null || break; sleep 0.1; done; ! kill -0 " .. p.pid
      .. " 2>/dev/null")
    p.pid = nil
    return h.read_file(p.dir .. "/err") or ""
  end

  function H.teardown()
    for _, p in pairs(H.proxies) do
      if p.pid then h.sh("kill -TERM " .. p.pid .. " 2>/dev/null") end
    end
    -- the stand-ins run in the namespaces: end exactly the processes in them, by pid
    for _, ns in ipairs { H.NS_P, H.NS_O } do
      h.sh("for p in $(ip netns pids " .. ns .. " 2>/dev/null); do kill -KILL $p; done")
      h.sh("ip netns del " .. ns .. " 2>/dev/null")
    end
    h.sh("rm -rf /etc/netns/" .. H.NS_P)
    if H.work then h.sh("rm -rf " .. h.q(H.work)) end
  end

  -- In the spec's outer describe: when skip says why the spec cannot run here, one pending
  -- test and false; otherwise setup before the first test, H.teardown after the last, and true.
  function H.bring_up(skip, setup)
    local busted = require "busted" -- a support module does not see busted's globals
    if skip then
      busted.it("runs", function() busted.pending(skip) end)
      return false
    end
    busted.lazy_setup(setup)
    busted.lazy_teardown(H.teardown)
    return true
  end

  return H
end

-- SANDSTACK_CREDENTIALS for a list of credentials as the specs write them (extra keys ignored)
function M.creds_json(list)
  local out = {}
  for i, c in ipairs(list) do
    local e = { name = c.name, host = c.host, port = c.port, secret = c.secret, placeholder = c.placeholder }
    for _, k in ipairs { "header", "format", "query", "path", "basic" } do e[k] = c[k] end
    out[i] = e
  end
  return core.json_encode(out)
end

function M.unhex(s) return (s:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end

-- a copy of env with the fields of changes set (a false value removes the field)
function M.with(env, changes)
  local out = {}
  for k, v in pairs(env) do out[k] = v end
  for k, v in pairs(changes) do out[k] = v or nil end
  return out
end

return M
