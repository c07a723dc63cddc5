-- sandstack-proxy's kernel relay (csrc/proxy/route/splice_relay.c, docs/proxy.md "Relay"): a raw
-- CONNECT tunnel moves socket -> pipe -> socket with splice(2). Two network namespaces joined by a
-- veth pair (spec/support/proxy_harness.lua): the proxy and the clients
-- (spec/support/splice_client.py) inside, spec/support/splice_peer.py outside. Every transfer is
-- random bytes hashed at both ends, so a byte lost, doubled or reordered fails the test; the peer
-- writes what it sent and received to a file, which the spec compares with what the client saw.
-- strace shows the proxy calling splice(2); the audit line says "relay":"splice" (or "uv", the
-- libuv relay it falls back to when fds run short). Runs in every mode (the ASan build's proxy in
-- asan mode). Needs root, ip(8) and strace.
local h = require "helpers"
local core = require "sandstack.core"
local ph = require "proxy_harness"

local H = ph.new("sspl")
local TOKEN, PROXY_IP, top = H.TOKEN, H.PROXY_IP, H.top
local in_p, audit, proxies = H.in_p, H.audit, H.proxies
local PEER = "198.51.100.30:9100"
local MiB = 1024 * 1024
local work, state

local SKIP = H.missing { { "command -v strace", "needs strace" } }

-- splice_client.py COMMAND's arguments through the main proxy to the peer
local function client_args(...) return { PROXY_IP, "3128", PEER, TOKEN, ... } end
-- splice_client.py COMMAND through the main proxy to the peer -> decoded JSON
local function client(cmd, ...) return (H.run_client(cmd, client_args(...), { script = "splice_client.py" })) end

-- how long this spec waits for a transfer's traces (its transfers are megabytes under ASan)
local WAIT = 30

-- what the peer recorded for a connection (written when it is done with it)
local function peer(tag)
  return h.wait_for("the peer's record of " .. tag, function()
    return core.json_decode(h.read_file(state .. "/" .. tag .. ".json") or "")
  end, WAIT)
end

-- the tunnel's audit line, found by the client's port (written when the proxy closes the tunnel)
local function audit_of(port)
  local want = PROXY_IP .. ":" .. port
  return h.wait_for("the audit line of " .. want, function()
    for _, l in ipairs(audit("main")) do
      if l.client == want then return l end
    end
  end, WAIT)
end

local function header(mode, n, tag) return #(("%s %d %s\n"):format(mode, n, tag)) end

local pipe_sizes = H.pipe_sizes

local function fds(pid) return tonumber((h.must("ls /proc/" .. pid .. "/fd | wc -l"):gsub("%s", ""))) end

local function setup()
  work = H.net_up("/tmp/sspl.XXXXXX", "", { "198.51.100.30" })
  state = work .. "/state"
  h.must("mkdir -p " .. h.q(state))
  H.start_peer("splice_peer.py", { "198.51.100.30", "9100", state }, { log = work .. "/peer.log", ready = 9100 })
  local policy = assert(core.policy_compile { allow = { { host = "198.51.100.30", port = 9100, raw = true } } })
  H.start_proxy("main", 3128, H.base_env("sspl-session", { SANDSTACK_EGRESS_POLICY = policy:render() }),
    { raise_nofile = true })
end

describe("sandstack-proxy splice relay", function()
  if not H.bring_up(SKIP, setup) then return end

  it("relays a raw tunnel with splice(2): strace sees every byte spliced in and out, the audit line says splice", function()
    local pid = proxies.main.pid
    local trace, err = work .. "/strace.out", work .. "/strace.err"
    local spid = h.start("setsid strace -f -e trace=splice -p " .. pid .. " -o " .. h.q(trace) .. " 2>"
      .. h.q(err) .. " </dev/null >/dev/null")
    h.wait_for("strace to attach", function() return (h.read_file(err) or ""):find("attached", 1, true) end, WAIT)
    local r = client("swap", tostring(4 * MiB), "traced")
    local line = audit_of(r.port)
    assert(h.signal(spid, "INT"), "strace ended before it was stopped")
    h.wait_for("strace's exit", function() return not h.running(spid) end, 5)
    local p = peer("traced")
    assert.equal(200, r.status)
    assert.equal(4 * MiB, r.recv)
    assert.equal(p.sent_sha, r.recv_sha)
    assert.equal(r.sent_sha, p.recv_sha)
    assert.equal(4 * MiB + header("swap", 4 * MiB, "traced"), line.bytes_up)
    assert.equal(4 * MiB, line.bytes_down)
    -- each byte goes into a pipe once and out of it once, and nothing else was spliced
    local spliced, calls = 0, 0
    for n in (h.read_file(trace) or ""):gmatch("splice%([^\n]-SPLICE_F_MOVE|SPLICE_F_NONBLOCK%)%s*=%s*(%d+)") do
      spliced, calls = spliced + tonumber(n), calls + 1
    end
    print(("# strace: %d splice calls moved %d bytes for a tunnel of %d + %d"):format(calls, spliced, line.bytes_up,
      line.bytes_down))
    assert.equal(2 * (line.bytes_up + line.bytes_down), spliced)
    assert.equal("splice", line.relay)
  end)

  -- The congestion control of a connection the proxy accepted, as ss(8) shows it (the name is
  -- the word before "wscale:"), read while a client holds the connection open.
  local function client_congestion(port)
    local out = h.must(in_p("bash -c " .. h.q(("exec 3<>/dev/tcp/%s/%d && ss -tinH state established '( sport = :%d )'")
      :format(PROXY_IP, port, port))))
    return out:match("(%S+)%s+wscale:"), out
  end

  it("sends toward the client under reno whatever the host's default; 'host' keeps the host's; a name the kernel refuses stops the start", function()
    local host = h.must(in_p("cat /proc/sys/net/ipv4/tcp_congestion_control")):gsub("%s", "")
    if host == "reno" then print("# this host's default is reno: the first check cannot tell the two apart here") end
    local cc, out = client_congestion(3128)
    assert.equal("reno", cc, out)
    local policy = assert(core.policy_compile { allow = { { host = "198.51.100.30", port = 9100, raw = true } } }):render()
    H.start_proxy("hostcc", 3131, H.base_env("sspl-hostcc", { SANDSTACK_EGRESS_POLICY = policy,
      SANDSTACK_PROXY_CLIENT_CONGESTION = "host" }))
    cc, out = client_congestion(3131)
    assert.equal(host, cc, out)
    H.stop_clean("hostcc")
    -- refused: a name no kernel has (at the listener, with the kernel's reason), and one that
    -- is not a name (when the configuration is read)
    for name, why in pairs { nosuchcontrol = "the kernel refused 'nosuchcontrol' (No such file or directory)",
      ["Reno;"] = "must be a congestion control's name" } do
      local res, ok = h.sh(in_p("env SANDSTACK_SESSION_TOKEN=" .. h.q(TOKEN) .. " SANDSTACK_PROXY_CLIENT_CONGESTION="
        .. h.q(name) .. " ASAN_OPTIONS=detect_leaks=1:exitcode=23 LSAN_OPTIONS=suppressions=" .. h.q(top
        .. "/spec/support/lsan.supp") .. " " .. h.q(top .. "/" .. H.PROXY) .. " --listen " .. PROXY_IP .. " --port 3132 2>&1"))
      assert.is_false(ok, res)
      assert.truthy(res:find("SANDSTACK_PROXY_CLIENT_CONGESTION", 1, true), res)
      assert.truthy(res:find(why, 1, true), res)
      assert.is_nil(res:find("Sanitizer", 1, true), res)
    end
  end)

  it("moves 64 MiB of random bytes each way at once, unchanged, and counts them exactly", function()
    local r = client("swap", tostring(64 * MiB), "big")
    local p, line = peer("big"), audit_of(r.port)
    assert.equal(200, r.status)
    assert.equal(64 * MiB, r.recv)
    assert.equal(64 * MiB, p.recv)
    assert.equal(p.sent_sha, r.recv_sha)
    assert.equal(r.sent_sha, p.recv_sha)
    assert.equal("splice", line.relay)
    assert.equal(64 * MiB + header("swap", 64 * MiB, "big"), line.bytes_up)
    assert.equal(64 * MiB, line.bytes_down)
  end)

  it("sends bytes that came with the CONNECT head first, then splices the rest behind them", function()
    local r = client("swap", tostring(MiB), "early", "100000")
    local p, line = peer("early"), audit_of(r.port)
    assert.equal(200, r.status)
    assert.equal(MiB, p.recv)
    assert.equal(r.sent_sha, p.recv_sha) -- in order: the early bytes, then the spliced ones
    assert.equal(p.sent_sha, r.recv_sha)
    assert.equal("splice", line.relay)
    assert.equal(MiB + header("swap", MiB, "early"), line.bytes_up)
  end)

  it("passes the client's FIN on while the destination has still to send (half-close, client first)", function()
    local r = client("after_eof", tostring(3 * MiB + 1), tostring(5 * MiB + 3), "client-fin")
    local p, line = peer("client-fin"), audit_of(r.port)
    assert.equal(3 * MiB + 1, p.recv) -- the peer saw the client's EOF, and only then answered
    assert.equal(r.sent_sha, p.recv_sha)
    assert.equal(5 * MiB + 3, r.recv)
    assert.equal(p.sent_sha, r.recv_sha)
    assert.equal(5 * MiB + 3, line.bytes_down)
    assert.equal("splice", line.relay)
  end)

  it("passes the destination's FIN on while the client has still to send (half-close, destination first)", function()
    local r = client("first", tostring(2 * MiB + 7), "peer-fin")
    local p, line = peer("peer-fin"), audit_of(r.port)
    assert.equal(2 * MiB + 7, r.recv) -- the client saw the peer's EOF, and only then sent
    assert.equal(p.sent_sha, r.recv_sha)
    assert.equal(2 * MiB + 7, p.recv)
    assert.equal(r.sent_sha, p.recv_sha)
    assert.equal(2 * MiB + 7 + header("first", 2 * MiB + 7, "peer-fin"), line.bytes_up)
    assert.equal("splice", line.relay)
  end)

  it("ends the tunnel at the destination's EOF anywhere in the stream, with every byte before it", function()
    for _, n in ipairs { 0, 1, 4095, 65537, MiB + 3, 8 * MiB } do
      local tag = "cut-" .. n
      local r = client("read", "cut", tostring(n), tag)
      local p, line = peer(tag), audit_of(r.port)
      assert.equal(n, r.recv, tag)
      assert.is_nil(r.recv_error, tag)
      assert.equal(p.sent_sha, r.recv_sha, tag)
      assert.equal(n, line.bytes_down, tag)
    end
  end)

  it("ends the tunnel when the client leaves anywhere in the stream (close or reset), and the destination sees it", function()
    for _, case in ipairs { { 0, "close" }, { 1, "close" }, { 65536, "close" }, { 3 * MiB, "close" },
      { 1, "reset" }, { 2 * MiB + 9, "reset" } } do
      local tag = ("leave-%d-%s"):format(case[1], case[2])
      local r = client("leave", tostring(256 * MiB), tag, tostring(case[1]), case[2])
      assert.equal(case[1], r.recv, tag)
      local line = audit_of(r.port)
      local p = peer(tag) -- the peer's send failed: the proxy closed its side too
      assert.is_not_nil(p.send_error, tag)
      assert.is_true(p.sent < 256 * MiB, tag)
      assert.is_true(line.bytes_down >= case[1], tag)
      print(("# client %s after %d bytes: the tunnel ended %s, the peer got %s after %d bytes"):format(case[2],
        case[1], line["end"], p.send_error, p.sent))
    end
  end)

  it("ends the tunnel on a reset from the destination, as upstream_error", function()
    local r = client("read", "reset", tostring(MiB + 5), "peer-reset")
    local line = audit_of(r.port)
    assert.is_true(r.recv <= MiB + 5)
    assert.equal("upstream_error", line["end"])
    assert.equal("splice", line.relay)
  end)

  it("stops the sender when the client stops reading: proxy memory does not grow, and every byte arrives after", function()
    local n = 256 * MiB
    local r = client("stall", tostring(n), "stall", "4", tostring(proxies.main.pid), state)
    local p = peer("stall")
    print(("# client stalled 4 s: the peer had sent %d then %d bytes; proxy RSS %d -> %d KiB"):format(
      r.progress_half, r.progress_stalled, r.rss_before, r.rss_stalled))
    -- the peer was stopped by full socket buffers and one pipe, not by the proxy's memory
    assert.is_true(r.progress_stalled < 48 * MiB, "sent " .. r.progress_stalled)
    assert.is_true(r.progress_stalled - r.progress_half < 4 * MiB, "still sending while stalled")
    assert.is_true(r.rss_stalled - r.rss_before < 1024, "RSS grew by " .. (r.rss_stalled - r.rss_before) .. " KiB")
    assert.equal(n, r.recv)
    assert.equal(p.sent_sha, r.recv_sha)
  end)

  it("grows busy pipes to 1 MiB within a 16 MiB budget: past it a tunnel keeps one page", function()
    local pid = proxies.main.pid
    local before = pipe_sizes(pid)
    local dir = work .. "/fill"
    h.must("mkdir -p " .. h.q(dir))
    -- 24 tunnels whose peer sends and whose client reads nothing: every pipe toward the client fills
    h.must(H.client_command("fill", client_args(24, 64 * MiB, dir), nil, "splice_client.py") .. " >"
      .. h.q(dir .. "/out") .. " 2>&1 &")
    local grown, total
    local ok, err = pcall(function()
      h.wait_for("24 filled tunnels", function() return h.read_file(dir .. "/ready") end, WAIT)
      h.wait_for("16 pipes of 1 MiB", function()
        grown = 0
        for inode, size in pairs(pipe_sizes(pid)) do
          if not before[inode] and size == MiB then grown = grown + 1 end
        end
        return grown >= 16
      end, 20)
      core.sleep(0.5) -- anything past the budget would have grown by now
      grown, total = 0, 0
      for inode, size in pairs(pipe_sizes(pid)) do
        if not before[inode] and size > 4096 then grown, total = grown + 1, total + size end
      end
    end)
    h.write_file(dir .. "/release", "")
    -- closed before anything is asserted, so a failure here leaves the next test a quiet proxy
    local closed = pcall(h.wait_for, "the filled tunnels' pipes to close", function()
      for inode in pairs(pipe_sizes(pid)) do if not before[inode] then return false end end
      return true
    end, WAIT)
    assert(ok, err)
    assert.is_true(closed, "the filled tunnels' pipes did not close")
    print(("# 24 full tunnels: %d grown pipes, %d KiB in all"):format(grown, math.floor(total / 1024)))
    assert.equal(16, grown)
    assert.equal(16 * MiB, total)
  end)

  it("carries 64 concurrent tunnels of 1 MiB each way, every byte checked, and leaks no fds", function()
    local pid = proxies.main.pid
    local before = fds(pid)
    local r = client("many", "64", tostring(MiB), "many", state)
    assert.equal(64, r.ok, core.json_encode(r.failures))
    local n = 0
    h.wait_for("64 audit lines", function()
      n = 0
      for _, l in ipairs(audit("main")) do
        if l.relay == "splice" and l.bytes_down == MiB then n = n + 1 end
      end
      return n >= 64
    end, WAIT)
    -- every pipe and dup'd fd was closed with its tunnel
    h.wait_for("the fds to close", function() return fds(pid) == before end, WAIT)
  end)

  it("falls back to the libuv relay when fds run short, and relays exactly there too", function()
    local pid = proxies.main.pid
    local limit, hard = h.must("prlimit --pid " .. pid .. " --nofile --output=SOFT,HARD --noheadings"):match("(%d+)%s+(%d+)")
    assert.is_not_nil(hard)
    -- 64 fds: the first tunnels splice (8 fds each), then a quarter of the limit is kept free
    h.must("prlimit --pid " .. pid .. " --nofile=64:" .. hard)
    local dir = work .. "/hold"
    h.must("mkdir -p " .. h.q(dir))
    h.must(H.client_command("hold", client_args(8, dir), nil, "splice_client.py") .. " >" .. h.q(dir .. "/out")
      .. " 2>&1 &")
    local ok, err = pcall(function()
      h.wait_for("8 held tunnels", function() return h.read_file(dir .. "/ready") end, WAIT)
      local r = client("swap", tostring(2 * MiB + 1), "fallback")
      local p, line = peer("fallback"), audit_of(r.port)
      assert.equal("uv", line.relay)
      assert.equal(2 * MiB + 1, r.recv)
      assert.equal(p.sent_sha, r.recv_sha)
      assert.equal(r.sent_sha, p.recv_sha)
      assert.equal(2 * MiB + 1, line.bytes_down)
    end)
    h.write_file(dir .. "/release", "")
    h.must("prlimit --pid " .. pid .. " --nofile=" .. limit .. ":" .. hard)
    assert(ok, err)
    local held = h.wait_for("the held tunnels' client", function()
      return core.json_decode(h.read_file(dir .. "/out") or "")
    end, WAIT)
    assert.equal(8, held.hi)
    local modes = {}
    h.wait_for("the held tunnels' audit lines", function()
      modes = {}
      for _, l in ipairs(audit("main")) do
        if l.bytes_down == 3 then modes[l.relay] = (modes[l.relay] or 0) + 1 end
      end
      return (modes.splice or 0) + (modes.uv or 0) >= 8
    end, WAIT)
    print(("# 64 fds: %d held tunnels spliced, %d fell back to libuv"):format(modes.splice or 0, modes.uv or 0))
    assert.is_true((modes.splice or 0) >= 1) -- control: while fds were plenty, the kernel relayed
    assert.is_true((modes.uv or 0) >= 1)
  end)

  it("exits cleanly on SIGTERM (and, under ASan, without a sanitizer report)", function()
    H.stop_clean("main")
  end)
end)
