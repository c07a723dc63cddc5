-- Every piece of shell code sandstack sends into an sbx guest (the exec wrapper, the kill script,
-- create's SETUP) run under dash, bash and busybox sh (the kill once passed CI under
-- busybox and did nothing under dash, which is /bin/sh in sbx's Ubuntu templates).
-- The guest is a container of the Debian test image with the simulator's options; the shell
-- under test is both the outer shell and, through PATH, the `sh` of every nested stage.
local core = require "sandstack.core"
local sbxt = require "sandstack_test.sbx" -- what core.sbx_exec keeps inside: its wrapper, its stderr split
local h = require "helpers"
local q = h.q

local SHELLS = { "dash", "bash", "busybox" }
local PATH_TAIL = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

-- create's SETUP script, read from the module source: the text that ships, not a copy.
local function setup_script()
  local src = assert(h.read_file("lua/sandstack/sbx/create.lua"))
  return assert(src:match("\nlocal SETUP = %[%[\n(.-)%]%]\n"), "no SETUP in lua/sandstack/sbx/create.lua")
end

local function x(s) return "x" .. core.base64(s) end

-- The wrapper's stdin: ws, mount, cwd, env entries, "--", argv, "." (csrc/sbx/wrapper.h).
local function input(ws, mnt, cwd, envlist, argv, cut)
  local lines = { x(ws), x(mnt), x(cwd) }
  for _, kv in ipairs(envlist) do lines[#lines + 1] = x(kv) end
  lines[#lines + 1] = "--"
  for _, a in ipairs(argv) do lines[#lines + 1] = x(a) end
  if not cut then lines[#lines + 1] = "." end
  return table.concat(lines, "\n") .. "\n"
end

describe("guest shell code #docker", function()
  local cid, dir, project

  -- Runs script under shell in the guest as user; returns the core.sbx_run result.
  local function run(shell, user, script, args, stdin)
    local argv = { "docker", "exec" }
    if stdin then argv[#argv + 1] = "-i" end
    for _, a in ipairs({ "-u", user, "-e", "PATH=/opt/shells/" .. shell .. ":" .. PATH_TAIL, cid,
      "/opt/shells/" .. shell .. "/sh", "-c", script, "sandstack-sbx" }) do
      argv[#argv + 1] = a
    end
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return assert(core.sbx_run(argv, { timeout = 60, stdin = stdin }))
  end

  -- A root shell command in the guest (test plumbing, always dash).
  local function guest(cmd)
    local out, _, code = h.sh("docker exec " .. q(cid) .. " sh -c " .. q(cmd))
    return out, code
  end

  -- Live (non-zombie) processes whose command line holds mark, as the guest's /proc shows.
  local function live(mark)
    local out = guest("for f in /proc/[0-9]*; do s=$(cat $f/stat 2>/dev/null) || continue; s=${s##*) }; "
      .. "set -- $s; [ \"$1\" = Z ] && continue; c=$(tr '\\0' ' ' < $f/cmdline 2>/dev/null); "
      .. "case $c in *for\\ f\\ in*) ;; *" .. mark .. "*) echo \"${f#/proc/} $c\" ;; esac; done")
    local n = 0
    for _ in out:gmatch("[^\n]+") do n = n + 1 end
    return n, out
  end

  setup(function()
    project = "sstest-gshell-" .. h.random_suffix(3)
    dir = h.must("mktemp -d /tmp/sstest-gshell.XXXXXX"):match("%S+")
    -- /opt/shells/<name>/sh is the shell under test; busybox is the host's static one
    h.must(table.concat({
      "mkdir -p " .. q(dir .. "/shells/dash") .. " " .. q(dir .. "/shells/bash") .. " " .. q(dir .. "/shells/busybox"),
      "ln -s /bin/dash " .. q(dir .. "/shells/dash/sh"),
      "ln -s /bin/bash " .. q(dir .. "/shells/bash/sh"),
      "cp /bin/busybox " .. q(dir .. "/shells/busybox/busybox"),
      "ln -s busybox " .. q(dir .. "/shells/busybox/sh"),
      "chmod -R a+rX " .. q(dir) }, " && "))
    cid = h.must("docker run -d --network none --init --security-opt seccomp=unconfined --label io.sandstack.project="
      .. project .. " -v " .. q(dir .. "/shells") .. ":/opt/shells:ro --entrypoint sleep sandstack-test/debian:local infinity")
      :match("%S+")
    -- what the simulator's create does: the workspace appears owned by the agent
    assert.equal(0, select(2, guest("mkdir -p /ws && chown 1000:1000 /ws")))
    -- what SETUP makes, made here so that each case stands alone (the SETUP case uses others)
    for _, sh in ipairs(SHELLS) do
      assert.equal(0, select(2, guest("mkdir -p /sandstack-" .. sh .. " /tmp/.sandstack-exec-" .. sh
        .. " && chmod 1777 /tmp/.sandstack-exec-" .. sh)))
    end
  end)

  teardown(function()
    if project then h.sh("docker rm -f $(docker ps -aq --filter label=io.sandstack.project=" .. project .. ")") end
    if dir then h.sh("rm -rf " .. q(dir)) end
  end)

  for _, sh in ipairs(SHELLS) do
    local mnt, xdir = "/sandstack-" .. sh, "/tmp/.sandstack-exec-" .. sh

    describe("under " .. sh, function()
      it("SETUP prepares the guest, and refuses a taken mount point, an agent socket, a missing tool", function()
        local SETUP = setup_script()
        local mnt, xdir = mnt .. "-setup", xdir .. "-setup"
        local r = run(sh, "root", SETUP, { mnt, "/run/sock-" .. sh, xdir })
        assert.equal(0, r.exit_code, r.stderr)
        local out = guest("stat -c '%a %U' " .. mnt .. " " .. xdir)
        assert.equal("755 root\n1777 root\n", out)
        r = run(sh, "root", SETUP, { mnt, "/run/sock-" .. sh, xdir })
        assert.equal(12, r.exit_code)
        guest(": > /run/sock-" .. sh)
        r = run(sh, "root", SETUP, { mnt .. "-b", "/run/sock-" .. sh, xdir })
        assert.equal(11, r.exit_code)
        -- a PATH with the shell and nothing else: base64 and the rest are missing
        r = assert(core.sbx_run({ "docker", "exec", "-u", "root", "-e", "PATH=/opt/shells/" .. sh, cid,
          "/opt/shells/" .. sh .. "/sh", "-c", SETUP, "sandstack-sbx", mnt .. "-c", "/run/none", xdir }, { timeout = 60 }))
        assert.equal(10, r.exit_code)
        -- busybox sh finds its own applets without PATH, and fails the later setsid -w check
        if sh ~= "busybox" then assert.matches("missing tool: base64", r.stderr) end
      end)

      it("the wrapper takes argv and env from stdin, byte for byte, and gives the command /dev/null", function()
        local nonce = "n" .. core.random_hex(8)
        local tricky = { "", "--", ".", "x", "-n", "a b", "two\nlines\n\n", "'\"$(id)`id`\\", "\1\2\127\255", "=" }
        local script = 'for a in "$@"; do printf "[%s]" "$a"; done; printf "|%s|%s|%s|" "$GREETING" "$EMPTY" "$MULTI"; '
          .. 'printf "%s|%s|%s|" "$(pwd)" "$(id -u)" "$(cat | wc -c)"; env | grep -c "^SANDSTACK_"; '
          .. 'ls ' .. mnt .. '/seen; echo "${PATH%%:*}"'
        guest("touch /ws/seen && chown 1000 /ws/seen")
        local argv = { "/opt/shells/" .. sh .. "/sh", "-c", script, "sh" }
        for _, a in ipairs(tricky) do argv[#argv + 1] = a end
        local r = run(sh, "agent", sbxt.wrapper_script, { nonce, xdir, core.random_hex(12) },
          input("/ws", mnt, mnt, { "EMPTY=", "GREETING=hi = there", "MULTI=a\nb" }, argv))
        assert.equal(0, r.exit_code, r.stderr)
        assert.equal(nonce .. "\n", r.stderr)
        local want = {}
        for _, a in ipairs(tricky) do want[#want + 1] = "[" .. a .. "]" end
        assert.equal(table.concat(want) .. "|hi = there||a\nb|" .. mnt .. "|1000|0|0\n" .. mnt .. "/seen\n/opt/shells/"
          .. sh .. "\n", r.stdout)
      end)

      it("a shell-command exec (box:exec of a string) runs through the wrapper under this shell", function()
        -- the argv box:exec makes of a string (every backend's, sandstack.session's), with its
        -- /bin/sh made the shell under test
        local argv = require("sandstack.session").command_argv(
          'a="x y"; printf "%s|" "$a" "$GREETING"; echo one two | wc -w; test -z "$1" && echo "no args"; exit 3')
        assert.equal("/bin/sh", argv[1])
        assert.equal(3, #argv)
        argv[1] = "/opt/shells/" .. sh .. "/sh"
        local nonce = "n" .. core.random_hex(8)
        local r = run(sh, "agent", sbxt.wrapper_script, { nonce, xdir, core.random_hex(12) },
          input("/ws", mnt, mnt, { "GREETING=hi there" }, argv))
        assert.equal(3, r.exit_code, r.stderr)
        assert.equal("x y|hi there|2\nno args\n", r.stdout)
      end)

      it("the wrapper runs nothing from a cut or malformed input (exit 126)", function()
        local token = core.random_hex(12)
        local cmd = { "touch", mnt .. "/cut-" .. sh }
        local r = run(sh, "agent", sbxt.wrapper_script, { "n1", xdir, token }, input("/ws", mnt, mnt, {}, cmd, true))
        assert.equal(126, r.exit_code)
        r = run(sh, "agent", sbxt.wrapper_script, { "n1", xdir, token },
          input("/ws", mnt, mnt, {}, cmd):gsub("%-%-\n", "junk\n"))
        assert.equal(126, r.exit_code)
        assert.equal(1, select(2, guest("test -e /ws/cut-" .. sh)))
      end)

      it("the kill script kills a real process group and says so only when it is gone", function()
        local token, mark = core.random_hex(12), "7776" .. tostring(tonumber(core.random_hex(2), 16))
        local data = input("/ws", mnt, mnt, {}, { "/opt/shells/" .. sh .. "/sh", "-c",
          "sleep " .. mark .. "1 & sh -c 'sleep " .. mark .. "2' & touch started; wait" })
        local log = dir .. "/bg-" .. sh
        h.must("( printf %s " .. q(data) .. " | docker exec -i -u agent -e PATH=/opt/shells/" .. sh .. ":" .. PATH_TAIL
          .. " " .. q(cid) .. " /opt/shells/" .. sh .. "/sh -c " .. q(sbxt.wrapper_script) .. " sandstack-sbx n2 "
          .. xdir .. " " .. token .. " >" .. q(log) .. " 2>&1; echo $? > " .. q(log .. ".rc") .. " ) >/dev/null 2>&1 &")
        guest("rm -f /ws/started")
        for _ = 1, 100 do
          if select(2, guest("test -e /ws/started")) == 0 and live(mark .. "2") > 0 then break end
          h.sh("sleep 0.1")
        end
        -- the two sleeps, the outer sh and maybe the inner one (dash and busybox exec it)
        assert.is_true(live(mark) >= 3)
        local r = run(sh, "agent", core.sbx_kill_script, { xdir, token })
        assert.equal(0, r.exit_code, r.stderr)
        assert.equal(0, (live(mark)))
        for _ = 1, 100 do
          if h.read_file(log .. ".rc") then break end
          h.sh("sleep 0.1")
        end
        assert.equal("137\n", h.read_file(log .. ".rc")) -- the wrapper saw its command killed
      end)

      it("the kill script fails when it cannot kill (EPERM) or has no usable group", function()
        local token, mark = core.random_hex(12), "7775" .. tostring(tonumber(core.random_hex(2), 16))
        local data = input("/ws", mnt, mnt, {}, { "sleep", mark })
        h.must("( printf %s " .. q(data) .. " | docker exec -i -u root " .. q(cid) .. " /opt/shells/" .. sh
          .. "/sh -c " .. q(sbxt.wrapper_script) .. " sandstack-sbx n3 " .. xdir .. " " .. token
          .. " ) >/dev/null 2>&1 &")
        for _ = 1, 100 do
          if live(mark) == 1 then break end
          h.sh("sleep 0.1")
        end
        assert.equal(1, (live(mark)))
        local r = run(sh, "agent", core.sbx_kill_script, { xdir, token })
        assert.equal(5, r.exit_code) -- root's group: EPERM, and it is still there
        assert.equal(1, (live(mark)))
        r = run(sh, "root", core.sbx_kill_script, { xdir, token })
        assert.equal(0, r.exit_code, r.stderr)
        assert.equal(0, (live(mark)))
        -- a pgid file a command rewrote: never pid 1 (`kill -- -1` is every process), never junk
        for _, bad in ipairs({ "1", "0", "-1", "12x", "007" }) do
          local t = core.random_hex(12)
          guest("printf %s " .. q(bad) .. " > " .. xdir .. "/" .. t .. ".pgid")
          r = run(sh, "agent", core.sbx_kill_script, { xdir, t })
          assert.equal(4, r.exit_code, bad)
        end
        -- no pgid file: the command never started (the cancel file now stops it) or has ended
        local t = core.random_hex(12)
        r = run(sh, "agent", core.sbx_kill_script, { xdir, t })
        assert.equal(0, r.exit_code)
        assert.equal(0, select(2, guest("test -e " .. xdir .. "/" .. t .. ".cancel")))
      end)
    end)
  end
end)
