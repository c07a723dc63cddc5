-- The network-namespace test bed shared by spec/proxy_core_spec.lua and spec/proxy_inspect_spec.lua:
-- two namespaces joined by a veth pair, "<prefix>p*" holding the proxy and the clients (its
-- /etc/hosts is /etc/netns/<ns>/hosts, which `ip netns exec` mounts over /etc/hosts) and
-- "<prefix>o*" the outside in 198.51.100.0/24; a test CA made with openssl; sandstack-proxy
-- instances started from the mode's build directory (or SANDSTACK_PROXY_UNDER_TEST, a path
-- relative to the checkout: another binary, e.g. one built from the code before a change, to see
-- the specs fail there) and ended by pid.
--
--   local H = require("proxy_harness").new("ssh2")
--   local SKIP = H.missing()                 -- nil, or why the spec cannot run here
--   H.net_up("/tmp/ssh2-proxy.XXXXXX", HOSTS, { "198.51.100.10" })  -> work directory
--   H.make_certs("ssh2-test-ca", "allowed.test", { "allowed.test", ... }, more_shell)
--   H.start_standin(); H.start_peer(script, args, { ready = file }); H.start_proxy("main", 3128, env)
--   local r = H.client("raw", H.PROXY_IP, "3128", text)   -- spec/support/proxy_client.py, decoded
--   local err = H.stop("main"); H.teardown()
--   describe(..., function() if not H.bring_up(SKIP, setup) then return end ... end)
local h = require "helpers"
local core = require "sandstack.core"

local M = {}

-- how long a peer, a stand-in or a proxy may take to start serving: a fixture's start, not a
-- bound under test (python3 behind pyenv's shims starts slowly on a loaded 2-core machine)
local START_SECONDS = 30

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
    PROXY = os.getenv("SANDSTACK_PROXY_UNDER_TEST") or build .. "/sandstack-proxy",
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
    h.wait_for("the stand-in", function() return h.read_file(H.work .. "/standin.ready") end, START_SECONDS)
  end

  -- python3 script args... (a path, or a name under spec/support) started in the outside
  -- namespace (opts.inside: the proxy's), its output in opts.log (default <work>/<name>.log);
  -- then, when opts.ready says how to tell, waits until it serves (START_SECONDS at most):
  -- ready is a file it makes, or a TCP port it listens on
  function H.start_peer(script, args, opts)
    opts = opts or {}
    local path = script:find("/", 1, true) and script or H.top .. "/spec/support/" .. script
    local words = {}
    for i, a in ipairs(args or {}) do words[i] = h.q(a) end
    local log = opts.log or H.work .. "/" .. script:match("([^/]-)%.py$") .. ".log"
    local within = opts.inside and H.in_p or H.in_o
    h.must(within("setsid python3 " .. h.q(path) .. " " .. table.concat(words, " ")) .. " </dev/null >" .. h.q(log)
      .. " 2>&1 &")
    local ready = opts.ready
    if type(ready) == "number" then
      local listening = "ss -ltn 'sport = :" .. ready .. "' | grep -q LISTEN"
      h.wait_for(script .. " on port " .. ready, function() return select(2, h.sh(within(listening))) end,
        START_SECONDS)
    elseif ready then
      h.wait_for(script .. " (" .. ready .. ")", function() return h.read_file(ready) end, START_SECONDS)
    end
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
  -- opts.ca_dir: give the proxy <dir>/ca as SANDSTACK_CA_DIR (p.ca);
  -- opts.control: its control socket's path (SANDSTACK_CONTROL_SOCKET), waited for
  function H.start_proxy(name, port, env, opts)
    opts = opts or {}
    local dir = H.work .. "/" .. name
    h.must("mkdir -p " .. h.q(opts.ca_dir and dir .. "/ca" or dir))
    local vars = {}
    for k, v in pairs(env) do vars[#vars + 1] = k .. "=" .. h.q(v) end
    if opts.ca_dir then vars[#vars + 1] = "SANDSTACK_CA_DIR=" .. h.q(dir .. "/ca") end
    if opts.control then vars[#vars + 1] = "SANDSTACK_CONTROL_SOCKET=" .. h.q(opts.control) end
    local lines = {}
    if opts.raise_nofile then lines[#lines + 1] = "ulimit -n $(ulimit -Hn)" end
    lines[#lines + 1] = "echo $$ > " .. h.q(dir .. "/pid")
    lines[#lines + 1] = "exec env " .. table.concat(vars, " ") .. " " .. h.q(H.top .. "/" .. H.PROXY) .. " --listen " .. H.PROXY_IP
      .. " --port " .. port .. " >" .. h.q(dir .. "/out") .. " 2>" .. h.q(dir .. "/err")
    h.write_file(dir .. "/run.sh", table.concat(lines, "\n") .. "\n")
    h.must(H.in_p("setsid sh " .. h.q(dir .. "/run.sh")) .. " </dev/null >/dev/null 2>&1 &")
    local p = { dir = dir, port = port, ca = opts.ca_dir and dir .. "/ca" or nil }
    local function said(event) return (h.read_file(dir .. "/out") or ""):find('"event":"' .. event .. '"', 1, true) end
    local ok = pcall(h.wait_for, "proxy " .. name, function() return said("listening") end, START_SECONDS)
    if not ok then error("proxy " .. name .. " did not start: " .. (h.read_file(dir .. "/err") or "")) end
    p.pid = h.track((h.read_file(dir .. "/pid") or ""):match("%d+"))
    H.proxies[name] = p
    if opts.control then
      h.wait_for("proxy " .. name .. "'s control socket", function() return said("control_listening") end,
        START_SECONDS)
    end
    return p
  end

  -- the shell command running spec/support/proxy_client.py (or script there) COMMAND ARGS... in
  -- the proxy's namespace, with the variables of env set
  function H.client_command(cmd, args, env, script)
    local words = {}
    for k, v in pairs(env or {}) do words[#words + 1] = k .. "=" .. h.q(v) end
    words[#words + 1] = "python3 " .. h.q(H.top .. "/spec/support/" .. (script or "proxy_client.py")) .. " " .. cmd
    for _, a in ipairs(args) do words[#words + 1] = h.q(a) end
    return H.in_p((env and "env " or "") .. table.concat(words, " "))
  end

  -- proxy_client.py COMMAND ARGS... in the proxy's namespace -> its last line decoded (raises
  -- when it is not JSON), and its whole output; opts.env: variables set for it, opts.script:
  -- another client under spec/support
  function H.run_client(cmd, args, opts)
    opts = opts or {}
    local out = h.must(H.client_command(cmd, args, opts.env, opts.script))
    local v = core.json_decode(out:match("([^\n]+)%s*$") or "")
    assert(v ~= nil, "the client printed no JSON: " .. out)
    return v, out
  end

  function H.client(cmd, ...) return H.run_client(cmd, { ... }) end

  -- every line the client printed, decoded
  function H.client_lines(cmd, args, opts)
    local _, out = H.run_client(cmd, args, opts)
    local list = {}
    for line in out:gmatch("[^\n]+") do list[#list + 1] = assert(core.json_decode(line), line) end
    return list, out
  end

  -- the proxy's pipes: inode -> capacity in bytes (F_GETPIPE_SZ on the pipe opened through /proc)
  function H.pipe_sizes(pid)
    local out = h.must("python3 -c " .. h.q([[
import fcntl, os, sys
d = "/proc/%s/fd" % sys.argv[1]
for fd in os.listdir(d):
    try:
        link = os.readlink(os.path.join(d, fd))
        if not link.startswith("pipe:"):
            continue
        f = os.open(os.path.join(d, fd), os.O_RDONLY | os.O_NONBLOCK)
        print(link[6:-1], fcntl.fcntl(f, 1032))
        os.close(f)
    except OSError:
        pass
]]) .. " " .. pid)
    local sizes = {}
    for inode, size in out:gmatch("(%d+) (%d+)") do sizes[inode] = tonumber(size) end
    return sizes
  end

  -- sandstack-proxy --control VERB (payload: SANDSTACK_CONTROL_PAYLOAD) on the control socket
  -- sock, as the user as_user when given -> the answer decoded ({ raw = output } when it is not
  -- JSON), the exit code, the output
  function H.control(sock, verb, payload, as_user)
    local cmd = ("env SANDSTACK_CONTROL_SOCKET=%s %s %s --control %s"):format(h.q(sock),
      payload and ("SANDSTACK_CONTROL_PAYLOAD=" .. h.q(payload)) or "", h.q(H.top .. "/" .. H.PROXY), verb)
    if as_user then cmd = ("setpriv --reuid %d --regid %d --clear-groups %s"):format(as_user, as_user, cmd) end
    local out, _, code = h.sh(cmd)
    return core.json_decode(out:match("[^\n]+") or "") or { raw = out }, code, out
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
    assert(h.signal(p.pid, "TERM"), "proxy " .. name .. " had already ended")
    h.wait_exit(p.pid, 10)
    p.pid = nil
    return h.read_file(p.dir .. "/err") or ""
  end

  -- H.stop, asserting the exit was clean: its stderr holds no sanitizer report ("Sanitizer",
  -- UBSan's "runtime error") and its stdout says "stopped"; -> stdout, stderr
  function H.stop_clean(name)
    local check = require "luassert" -- a support module does not see busted's global assert
    local err = H.stop(name)
    local out = h.read_file(H.proxies[name].dir .. "/out") or ""
    check.is_nil(err:find("Sanitizer", 1, true), err)
    check.is_nil(err:find("runtime error", 1, true), err)
    check.truthy(out:find('"event":"stopped"', 1, true), name .. " did not say it stopped")
    return out, err
  end

  function H.teardown()
    for _, p in pairs(H.proxies) do
      if p.pid then h.signal(p.pid, "TERM") end
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

-- the lines of the file at path (none when it is missing), each hex-decoded: what an origin
-- logged of every request it got, in order, as raw bytes
function M.hex_lines(path)
  local t = {}
  for line in (h.read_file(path) or ""):gmatch("[^\n]+") do t[#t + 1] = M.unhex(line) end
  return t
end

-- a copy of env with the fields of changes set (a false value removes the field)
function M.with(env, changes)
  local out = {}
  for k, v in pairs(env) do out[k] = v end
  for k, v in pairs(changes) do out[k] = v or nil end
  return out
end

return M
