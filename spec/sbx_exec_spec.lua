-- box:exec through the wrapper, in a simulator sandbox (a real container) or a real sbx:
-- byte-exact separate streams, exit codes, cwd, env, timeouts that kill the process group
-- (checked in the container itself), cancel before start, output caps, a sibling that keeps
-- running, idle stop, secrets kept off host command lines. Every case runs once per simulator
-- template (Debian with dash as /bin/sh, and busybox); a real sbx has one.
local core = require "sandstack.core"
local sbxt = require "sandstack_test.sbx" -- what core.sbx_exec keeps inside: its wrapper, its stderr split
local sbx = require "sandstack.sbx"
local H = require "sbx_helpers"

-- The wrapper's stdin (see csrc/sbx/wrapper.h): workspace, mount, cwd, env, "--", argv, ".".
local function wrapper_input(box, argv, envlist)
  local function x(s) return "x" .. core.base64(s) end
  local lines = { x(box.workspace), x(box.mount), x(box.work_dir) }
  for _, kv in ipairs(envlist or {}) do lines[#lines + 1] = x(kv) end
  lines[#lines + 1] = "--"
  for _, a in ipairs(argv) do lines[#lines + 1] = x(a) end
  lines[#lines + 1] = "."
  return table.concat(lines, "\n") .. "\n"
end

-- The processes in the sandbox's container whose command line holds mark, read by docker
-- itself (never through sandstack).
local function guest_procs(env, box, mark)
  local out = H.sh("docker exec " .. H.q(H.container(env, box.name)) .. " sh -c "
    .. H.q("for f in /proc/[0-9]*; do s=$(cat $f/stat 2>/dev/null) || continue; s=${s##*) }; set -- $s; "
      .. "[ \"$1\" = Z ] && continue; c=$(tr '\\0' ' ' < $f/cmdline 2>/dev/null); "
      .. "case $c in *" .. mark .. "*) echo \"${f#/proc/} $c\" ;; esac; done"))
  local procs = {}
  for line in out:gmatch("[^\n]+") do
    if not line:find("for f in", 1, true) then procs[#procs + 1] = line end
  end
  return procs
end

for _, tpl in ipairs(H.templates) do

describe("sbx exec #docker [" .. tpl.name .. "]", function()
  local env, backend, box
  H.with_box("exec", { template = tpl.image }, function(e, b, x) env, backend, box = e, b, x end)

  it("runs argv verbatim with separate, byte-exact streams and the exit code", function()
    local bytes = {}
    for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
    local all = table.concat(bytes)
    -- the bytes travel as an argument (no NUL: argv cannot hold one) and back on stdout
    local arg = all:sub(2)
    local r = assert(box:exec({ "sh", "-c", 'printf "%s" "$1"; printf "\\000"; printf "to stderr\\n" >&2; exit 42', "sh", arg }))
    assert.equal(arg .. "\0", r.stdout)
    assert.equal("to stderr\n", r.stderr)
    assert.equal(42, r.exit_code)
  end)

  it("keeps empty arguments and trailing newlines", function()
    local r = assert(box:exec({ "sh", "-c", 'for a in "$@"; do printf "[%s]" "$a"; done', "sh", "", "two\n\n", " " }))
    assert.equal("[][two\n\n][ ]", r.stdout)
  end)

  it("runs in work_dir by default, as the image's user, in its own namespaces", function()
    local r = assert(box:exec({ "sh", "-c", "pwd; id -u; touch f && ls -ln f | awk '{print $3}'" }))
    local pwd, uid, owner = r.stdout:match("^(%S+)\n(%d+)\n(%d+)\n$")
    assert.equal("/sandstack/work", pwd)
    assert.equal("1000", uid)
    assert.equal("1000", owner)
    -- the file is on the host, in this sandbox's workspace
    local f = io.open(box.workspace .. "/work/f", "r")
    assert.truthy(f)
    f:close()
    -- files of other owners show as nobody, and chown to another user fails
    r = assert(box:exec({ "sh", "-c", "stat -c %u /etc/passwd; chown 0 f" }))
    assert.equal("65534\n", r.stdout)
    assert.not_equal(0, r.exit_code)
  end)

  it("passes env and a relative cwd; a missing cwd exits 125 with the shell's message", function()
    local r = assert(box:exec({ "sh", "-c", 'printf "%s" "$GREETING"' }, { env = { GREETING = "hi there" } }))
    assert.equal("hi there", r.stdout)
    assert(box:exec({ "mkdir", "-p", "sub" }))
    r = assert(box:exec({ "pwd" }, { cwd = "sub" }))
    assert.equal("/sandstack/work/sub\n", r.stdout)
    r = assert(box:exec({ "true" }, { cwd = "/sandstack/nope" }))
    assert.equal(125, r.exit_code)
    assert.matches("nope", r.stderr)
  end)

  it("timeout kills the command's group, grandchildren included", function()
    local _, err = box:exec({ "sh", "-c", "sh -c 'sleep 300' & echo $! > gc.pid; sleep 300" }, { timeout = 2 })
    assert.equal("timeout", err.kind)
    assert.is_true(err.killed)
    local r = assert(box:exec({ "sh", "-c", 'kill -0 "$(cat gc.pid)" 2>/dev/null && echo alive || echo gone' }))
    assert.equal("gone\n", r.stdout)
    -- the sandbox is kept
    assert.equal(0, assert(box:exec({ "true" })).exit_code)
  end)

  it("a command that has not started yet never starts after its cancel", function()
    -- the backend's own kill script (core.sbx_kill_script, as box:exec's kill runs it) and wrapper,
    -- driven with one token: cancel first, then start
    local token = core.random_hex(12)
    local kill = assert(core.sbx_run({ env.sbx, "exec", box.name, "sh", "-c", core.sbx_kill_script, "sandstack-sbx",
      "/tmp/.sandstack-exec", token }, { timeout = 60 }))
    assert.equal(0, kill.exit_code, kill.stderr) -- the group is gone (never there): the kill did its part
    local nonce = "n" .. core.random_hex(8)
    local res = assert(core.sbx_run({ env.sbx, "exec", "-i", box.name, "sh", "-c", sbxt.wrapper_script,
      "sandstack-sbx", nonce, "/tmp/.sandstack-exec", token }, { timeout = 60,
      stdin = wrapper_input(box, { "touch", "started" }) }))
    assert.truthy(sbxt.split_stderr(res.stderr, nonce)) -- the wrapper ran ...
    assert.equal(137, res.exit_code) -- ... and refused to start the command
    local r = assert(box:exec({ "sh", "-c", "test -e started && echo yes || echo no" }))
    assert.equal("no\n", r.stdout)
  end)

  it("output past the budget ends the command with output_limit; the sandbox is kept", function()
    local _, err = box:exec_bounded({ "sh", "-c", "echo start > flood.mark; yes; echo end >> flood.mark" },
      { max_output_bytes = 100000 })
    assert.equal("output_limit", err.kind)
    assert.equal(100000, err.limit)
    local r = assert(box:exec({ "cat", "flood.mark" }))
    assert.equal("start\n", r.stdout) -- the writer was killed, not left running
    -- the default budget is 8 MiB and the host keeps at most that
    _, err = box:exec({ "sh", "-c", "head -c 20000000 /dev/zero" })
    assert.equal("output_limit", err.kind)
    assert.equal(8 * 1024 * 1024, err.limit)
    -- within the budget, everything comes back
    r = assert(box:exec_bounded({ "head", "-c", "50000", "/dev/zero" }, { max_output_bytes = 100000 }))
    assert.equal(50000, #r.stdout)
  end)

  it("a sibling command in the same sandbox keeps running through another's timeout", function()
    local child = H.spawn(([[
      local sbx = require "sandstack.sbx"
      local b = assert(sbx.backend(%s))
      local box = assert(b:acquire{ conversation = "conv", key = "exec" })
      local r, err = box:exec({ "sh", "-c", "sleep 6; echo sibling-done" })
      print(r and r.stdout or tostring(err))
    ]]):format(H.opts_literal(env)))
    local _, err = box:exec({ "sleep", "300" }, { timeout = 3 })
    assert.equal("timeout", err.kind)
    assert.matches("sibling%-done", child:result())
  end)

  it("a timed-out sleep is really dead afterwards, as the container itself shows", function()
    local mark = "98765" .. tostring(tonumber(core.random_hex(2), 16))
    local _, err = box:exec({ "sleep", mark }, { timeout = 1 })
    assert.equal("timeout", err.kind)
    if H.e2e then pending("needs the simulator's container") return end
    local left = guest_procs(env, box, mark)
    assert.same({}, left)
    assert.is_true(err.killed)
    assert.equal(0, assert(box:exec({ "true" })).exit_code) -- the sandbox is kept
  end)

  it("a kill that cannot work (EPERM) says killed=false and retires the sandbox", function()
    -- the command runs as root, the kill exec as the sandbox's user: kill(2) answers EPERM. The
    -- command must be running when its time is up: sbx's timeout counts from the sbx exec's own
    -- start, and a loaded CI host took over a second to reach the command, whose cancel file then
    -- kept it from ever starting (no process, a kill with nothing to fail on). 5 s leaves it room.
    local mark = "98764" .. tostring(tonumber(core.random_hex(2), 16))
    local _, err = box:exec({ "sleep", mark }, { timeout = 5, user = "root" })
    assert.equal("timeout", err.kind)
    if not H.e2e then
      assert.equal(1, #guest_procs(env, box, mark)) -- the kill really could not work
    end
    assert.is_false(err.killed)
    assert.matches("the kill failed", err.message)
    local _, rerr = box:exec({ "true" })
    assert.equal("retired", rerr.kind)
    assert.equal("kill_failed", rerr.reason)
    -- the next acquire replaces it
    box:dispose()
    box = assert(backend:acquire{ conversation = "conv", key = "exec" })
  end)

  it("keeps env values and argv off every host command line", function()
    local secret_env = "sEcReT-eNv-" .. core.random_hex(8)
    local secret_arg = "sEcReT-aRg-" .. core.random_hex(8)
    local watch = H.watch_cmdlines({ secret_env, secret_arg, core.base64(secret_env),
      core.base64("TOKEN_X=" .. secret_env), core.base64(secret_arg) })
    local r = box:exec({ "sh", "-c", 'sleep 2; printf "%s|%s" "$TOKEN_X" "$1"', "sh", secret_arg },
      { env = { TOKEN_X = secret_env } })
    local seen = watch.result()
    assert(r, "exec failed")
    assert.equal(secret_env .. "|" .. secret_arg, r.stdout) -- the command sees both
    assert.is_true(seen.rounds > 3 and seen.wrappers > 0, "the watcher never saw sbx run")
    assert.same({}, seen.hits)
  end)

  it("refuses an empty argv", function()
    assert.has_error(function() box:exec({}) end)
    assert.has_error(function() box:exec({ "true" }, { bogus = 1 }) end)
  end)

  it("an idle-stopped sandbox starts again; its chatter stays out of the command's stderr", function()
    if H.e2e then pending("needs the simulator's idle-stop switch") return end
    H.sbx(env, "sim", "idle-stop", box.name)
    local r = assert(box:exec({ "sh", "-c", "echo own >&2; cat /proc/self/mountinfo | grep -c ' /sandstack ' " }))
    assert.equal("own\n", r.stderr)
    assert.equal("1\n", r.stdout) -- the wrapper bound the workspace again
    local out = H.sbx(env, "ls", "--json")
    assert.matches('"status": "running"', out)
  end)
end)

describe("sbx box file methods #docker [" .. tpl.name .. "]", function()
  local box
  H.with_box("files", { template = tpl.image }, function(_, _, x) box = x end)

  it("delegates reads and writes to the host-side file plane", function()
    if not core.fileplane_open then pending("the file plane is not in this build") return end
    assert(box:write("a.txt", "from the host\0bytes"))
    assert.equal("from the host\0bytes", assert(box:read("a.txt")))
    local r = assert(box:exec({ "cat", "a.txt" }))
    assert.equal("from the host\0bytes", r.stdout)
    assert(box:exec({ "sh", "-c", "printf guest > b.txt" }))
    assert.equal("guest", assert(box:read("/sandstack/work/b.txt")))
    assert.equal("file", assert(box:attributes("b.txt")).mode)
    local names = {}
    for n in box:dir(".") do names[n] = true end
    assert.is_true(names["a.txt"] and names["b.txt"])
  end)

  it("remove and reclaim run in the guest after the host-side check", function()
    if not core.fileplane_open then pending("the file plane is not in this build") return end
    assert(box:mkdir("d"))
    assert(box:write("d/x", "x"))
    local _, err = box:remove("d") -- rm -f refuses a directory
    assert.equal("invalid", err.kind)
    assert(box:remove("d", { recursive = true }))
    assert.is_nil(box:attributes("d"))
    assert(box:write("gone.txt", "1"))
    assert(box:remove("gone.txt"))
    assert.is_nil(box:attributes("gone.txt"))
    -- a link the guest made is refused by the check, never followed
    assert(box:exec({ "ln", "-s", "/etc", "link" }))
    _, err = box:remove("link/passwd")
    assert.truthy(err)
    assert.equal(0, assert(box:exec({ "test", "-e", "/etc/passwd" })).exit_code)
    assert(box:mkdir("junk"))
    assert(box:reclaim("junk"))
    assert.is_nil(box:attributes("junk"))
    _, err = box:reclaim("a/b")
    assert.equal("placement", err.reason)
    _, err = box:reclaim("/etc") -- outside the storage base's parent
    assert.equal("outside", err.reason)
    _, err = box:reclaim("/sandstack") -- the workspace root itself
    assert.equal("root", err.reason)
  end)
end)

end

describe("sbx exec input", function()
  it("a large input to an sbx that exits without reading it does not end the host (SIGPIPE)", function()
    -- exec's env and argv travel on sbx's stdin; sbx may fail before reading any of it
    local out = H.spawn([[
      local core = require "sandstack.core"
      local r, err = core.sbx_run({ "true" }, { stdin = string.rep("x", 4 * 1024 * 1024) })
      print(r and ("exit " .. tostring(r.exit_code)) or tostring(err))
    ]]):result()
    assert.equal("exit 0\n", out)
  end)
end)
