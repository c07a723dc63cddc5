-- Snapshots of a hostile guest (#docker). The guest puts spec/support/csrc/guest_impostor.c over
-- every program a host could borrow from its image (cp, sh, find, md5sum, busybox, the dynamic
-- loader): run by anyone, it marks every volume it can reach and lies, or hangs. Snapshot,
-- restore, fork and changes{since} must give what the real programs give, with no marker
-- anywhere; the guest must not keep the parent paused; the helper that copies and compares must
-- be confined like the sandbox; the snapshot's image must keep no key and no project label, and
-- a restore given no key must have none. The attacks run on two sandbox images: the busybox
-- agent image (every tool an applet of /bin/busybox) and Debian (coreutils, dash, the loader).
-- The trusted side (listings, the guest's later writes) is a container of the test's own Debian
-- image over the volume. Objects: projects "sstest-sg-<random>-...", the listing containers
-- (--rm) and the snapshots whose source starts with the prefix; all removed at the end.
local sandstack = require "sandstack"
local core = sandstack.core
local docker = sandstack.docker
local h = require "helpers"

local PREFIX = "sstest-sg-" .. h.random_suffix(3)
local AGENT, DEBIAN, SOCAT = "sandstack-test/agent:local", "sandstack-test/debian:local", "sandstack-test/socat:local"
local KEY = "sk-sg-" .. core.random_hex(16)
local ENGINE_SOCK = (os.getenv("DOCKER_HOST") or "unix:///var/run/docker.sock"):match("^unix://(.+)$")
  or "/var/run/docker.sock"
local eng = assert(sandstack.engine {})

local WORK = h.must("mktemp -d /tmp/sstest-sg.XXXXXX"):gsub("%s+$", "")
local IMPOSTOR = WORK .. "/impostor"

local CASES = {
  { name = "busybox", image = AGENT, replace = { "bin/busybox" } },
  { name = "debian", image = DEBIAN, replace = { "usr/bin/cp", "usr/bin/find", "usr/bin/md5sum", "usr/bin/dash",
    "usr/bin/busybox", "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" } },
}

-- A workspace with every kind of entry a copy must keep: owners, set-id and odd modes,
-- nanosecond times on files, links and directories, a hard link, links that point up and out,
-- a FIFO and a sparse file.
local FILL = "cd /w && mkdir -p sub/deep && echo alpha > a.txt && echo gone > gone.txt && echo deep > sub/deep/f.txt"
  .. " && ln sub/deep/f.txt hard.txt && ln -s a.txt link-to-a && ln -s /etc/shadow abs-link && ln -s ../../.. sub/deep/up"
  .. " && mkfifo fifo && truncate -s 64M sparse.bin && printf end >> sparse.bin"
  .. " && chown 1234:5678 a.txt sub/deep/f.txt && chown -h 4321:8765 link-to-a && chmod 0640 a.txt"
  .. " && chmod 4755 sub/deep/f.txt && chmod 0700 sub"
  .. " && touch -h -d '2001-02-03 04:05:06.123456789' a.txt link-to-a fifo sub/deep sub ."

-- Every entry with its type, mode, owner, size, time, link count and target, and every regular
-- file's checksum: two volumes with the same listing hold the same tree.
local LIST = "cd /w && { find . -type d -printf 'd %P %m %U %G %T@\\n';"
  .. " find . ! -type d -printf '%y %P %m %U %G %s %T@ %n %l\\n'; find . -type f -exec md5sum {} +; } | LC_ALL=C sort"

-- A shell command in a container of the test's own image over volume at /w.
local function trusted(volume, script, writable)
  return h.must(("docker run --rm --network none --label io.sandstack.test=snapshot-guest -v %s:/w%s %s sh -c %s")
    :format(h.q(volume), writable and "" or ":ro", DEBIAN, h.q(script)))
end
local function listing(volume) return trusted(volume, LIST) end
local function markers(volume) return trusted(volume, "find /w -name 'SANDSTACK-IMPOSTOR*'") end

local function inspect(name) return assert(eng:call("GET", "/containers/" .. name .. "/json")) end
local function up(stack, err) return assert(stack, "the stack did not start: " .. tostring(err)) end

-- The guest's own move: files over its image's programs, written into its container.
local function put_files(container, files)
  local tar = {}
  for _, f in ipairs(files) do
    tar[#tar + 1] = core.tar_header(f[1], #f[2], f[3] or 493, os.time()) .. f[2] .. string.rep("\0", (512 - #f[2] % 512) % 512)
  end
  tar[#tar + 1] = string.rep("\0", 1024)
  assert(eng:call("PUT", "/containers/" .. container .. "/archive", table.concat(tar),
    { query = { path = "/" }, content_type = "application/x-tar" }))
end
local function set_mode(container, mode) put_files(container, { { "impostor-mode", mode, 420 } }) end

local function stack_opts(project, image, extra)
  local o = { project_name = project, agent_port = 8080, forwarder_image = SOCAT, pull = "never",
    volumes = { { name = "workspace" } },
    services = { { name = "sandbox", image = image, command = { "agent" },
      volumes = { { name = "workspace", target = "/workspace" } } } } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- The container's environment as one text, a variable a line.
local function env_text(name) return table.concat(inspect(name).Config.Env or {}, "\n") .. "\n" end

-- The create bodies of the containers that copied or compared volumes, with their names, among
-- the requests the engine double (spec/support/engine_double.lua, "record") passed on.
local function helper_creates(recorder)
  local out = {}
  for _, r in ipairs(recorder.requests()) do
    local name = r.target:match("^/v[%d.]+/containers/create%?name=([^&]+)")
    if name and (name:find("copy", 1, true) or name:find("diff", 1, true)) then
      out[#out + 1] = { name = name, body = assert(core.json_decode(r.body)) }
    end
  end
  return out
end

-- Fails when a copy or diff helper of project is left.
local function no_helper_left(project)
  local f = { label = { "io.sandstack.project=" .. project } }
  for _, c in ipairs(assert(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }))) do
    assert.is_nil(c.Names[1]:find("snapshot", 1, true), "a helper is left: " .. c.Names[1])
  end
end

-- Helpers a hung copy left behind (labelled with the snapshot's source, not with a project).
local function remove_hung_helpers()
  local f = { label = { "io.sandstack.snapshot.source" } }
  for _, c in ipairs(eng:call("GET", "/containers/json", nil, { query = { all = "1", filters = f } }) or {}) do
    if (c.Labels["io.sandstack.snapshot.source"] or ""):sub(1, #PREFIX) == PREFIX then
      eng:call("DELETE", "/containers/" .. c.Id, nil, { query = { force = "1" }, ok = { [404] = true } })
    end
  end
end

local function cleanup()
  docker.reap { prefix = PREFIX }
  remove_hung_helpers()
  local mine = {}
  for _, s in ipairs(docker.snapshots() or {}) do
    if (s.source or ""):sub(1, #PREFIX) == PREFIX then mine[#mine + 1] = s.id end
  end
  if #mine > 0 then docker.remove_snapshot(mine) end
end

setup(function()
  h.must(("cc -static-pie -nostdlib -fPIE -fno-stack-protector -O1 -o %s spec/support/csrc/guest_impostor.c"):format(h.q(IMPOSTOR)))
end)

teardown(function()
  cleanup()
  h.sh("rm -rf " .. h.q(WORK))
end)

for _, case in ipairs(CASES) do
  describe("snapshots of a guest that replaced its programs (" .. case.name .. ") #docker", function()
    local P = PREFIX .. "-" .. case.name
    local sbx, vol = P .. "-sandbox", P .. "-workspace"
    local stack, start_err, snap
    local volumes = { vol } -- every volume the impostor could reach

    lazy_setup(function()
      stack, start_err = docker.start(P, stack_opts(P, case.image))
      if not stack then return end
      trusted(vol, FILL, true)
      local bin = assert(h.read_file(IMPOSTOR))
      local files = { { "impostor-mode", "exit", 420 } }
      for _, path in ipairs(case.replace) do files[#files + 1] = { path, bin } end
      put_files(sbx, files)
    end)

    lazy_teardown(function()
      if stack then stack:destroy(); stack:close() end
    end)

    -- volumes: the ones that still exist (a listing of a removed one would make it again, empty)
    local function no_marker_anywhere(more)
      for _, list in ipairs { volumes, more or {} } do
        for _, v in ipairs(list) do assert.equal("", markers(v), "a guest program ran on volume " .. v) end
      end
    end

    it("the control: the replaced programs run, and mark the workspace, when the guest runs them", function()
      up(stack, start_err)
      local out = h.must(("docker exec %s /bin/ls /"):format(h.q(sbx)))
      assert.matches("impostor-was-here", out, nil, true)
      assert.matches("SANDSTACK%-IMPOSTOR%-ls", markers(vol))
      trusted(vol, "rm -f /w/SANDSTACK-IMPOSTOR-* /w/impostor-was-here", true)
      assert.equal("", markers(vol))
    end)

    it("snapshot, restore and fork copy the workspace exactly, running none of the guest's programs", function()
      local s = up(stack, start_err)
      local before = listing(vol)
      assert.matches("p fifo 644 0 0 0 981173106.1234567890 1", before, nil, true) -- the control: FILL made it all
      snap = assert(s:snapshot { name = "guest" })
      volumes[#volumes + 1] = snap.volumes.workspace
      assert.equal(before, listing(snap.volumes.workspace))
      local RP, FP = P .. "-r", P .. "-f"
      local r = assert(docker.start(RP, { from_snapshot = snap, project_name = RP }))
      local child, fsnap = s:fork(FP, { project_name = FP })
      assert(child, fsnap)
      assert.equal(before, listing(RP .. "-workspace"))
      assert.equal(before, listing(FP .. "-workspace"))
      -- the sparse file stays sparse (64 MiB written out would be 131072 blocks)
      assert.is_true(tonumber(trusted(RP .. "-workspace", "stat -c %b /w/sparse.bin")) < 2048)
      no_marker_anywhere { RP .. "-workspace", FP .. "-workspace", fsnap.volumes.workspace }
      assert(r:destroy()); r:close()
      assert(child:destroy()); child:close()
      assert(docker.remove_snapshot(fsnap))
    end)

    it("changes{since} reports what changed, whatever the guest's find, md5sum and sh would print", function()
      local s = up(stack, start_err)
      assert(snap, "the snapshot test did not make one")
      trusted(vol, "cd /w && printf 'ALPHA\\n' > a.txt && rm gone.txt && echo omega > sub/new.txt", true)
      local ch = assert(s:changes { since = snap })
      assert.same({ { path = "a.txt", kind = "changed" }, { path = "gone.txt", kind = "deleted" },
        { path = "sub/new.txt", kind = "added" } }, ch.workspace.workspace)
      no_marker_anywhere()
    end)

    it("a copy the guest makes hang keeps the parent paused no longer than a small copy takes", function()
      local s = up(stack, start_err)
      set_mode(sbx, "hang")
      local script, out = WORK .. "/hang-" .. case.name .. ".lua", WORK .. "/hang-" .. case.name .. ".out"
      h.write_file(WORK .. "/record-" .. case.name .. ".json", core.json_encode(s:record()))
      local cmd = h.child_command(script, ([[
        local docker = require("sandstack").docker
        local f = assert(io.open(%q)); local rec = require("sandstack.core").json_decode(f:read("*a")); f:close()
        local s = assert(docker.reconnect(rec))
        local snap, err = s:snapshot { name = "hang" }
        print("DONE " .. (snap and snap.id or tostring(err)))
      ]]):format(WORK .. "/record-" .. case.name .. ".json"))
      local pid = h.start(("setsid %s > %s 2>&1"):format(cmd, h.q(out)))
      local longest, since, done = 0, nil, nil
      local stop = core.engine_clock() + 45
      repeat
        local now = core.engine_clock()
        if inspect(sbx).State.Paused then
          since = since or now
          longest = math.max(longest, now - since)
        else
          since = nil
        end
        done = (h.read_file(out) or ""):match("DONE [^\n]*")
        core.sleep(0.1)
      until done or now > stop
      if not done then
        h.signal(pid, "KILL", true)
        eng:call("POST", "/containers/" .. sbx .. "/unpause", nil, { ok = { [409] = true } })
        remove_hung_helpers()
      end
      set_mode(sbx, "exit")
      assert.truthy(done, ("the snapshot never ended: the parent was paused %.1f s and counting"):format(longest))
      assert.is_true(longest < 15, ("the parent stayed paused %.1f s"):format(longest))
      assert.matches("^DONE snap%-", done)
      no_marker_anywhere { done:match("snap%-%x+") .. "-workspace" }
    end)
  end)
end

describe("a snapshot's confinement, its bound and its image #docker", function()
  local P = PREFIX .. "-key"
  local sbx, vol = P .. "-sandbox", P .. "-workspace"
  local stack, start_err, recorder

  lazy_setup(function()
    recorder = require("engine_double").start("record", { engine = ENGINE_SOCK })
    stack, start_err = docker.start(P, stack_opts(P, AGENT, { api_key = KEY, docker_host = recorder.host }))
    if stack then trusted(vol, "echo kept > /w/kept.txt", true) end
  end)

  lazy_teardown(function()
    if stack then stack:destroy(); stack:close() end
    if recorder then recorder.stop() end
  end)

  it("keeps the key and the project out of the snapshot's image; a restore given no key has none", function()
    local s = up(stack, start_err)
    -- the control: no proxy, so the sandbox holds the key
    assert.truthy(env_text(sbx):find("ANTHROPIC_API_KEY=" .. KEY .. "\n", 1, true))
    local snap = assert(s:snapshot())
    local status, text = eng:request("GET", "/images/" .. snap.image .. "/json", nil, { raw = true })
    assert.equal(200, status)
    assert.is_nil(text:find(KEY, 1, true), "the key is in the snapshot's image")
    assert.is_nil(text:find("io.sandstack.project", 1, true), "the parent's project label is in the snapshot's image")
    local info = assert(core.json_decode(text))
    local base = assert(eng:call("GET", "/images/" .. AGENT .. "/json"))
    assert.same(base.Config.Env, info.Config.Env)
    local keys = {}
    for k in pairs(info.Config.Labels) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.same({ "io.sandstack.created", "io.sandstack.session", "io.sandstack.snapshot", "io.sandstack.snapshot.name",
      "io.sandstack.snapshot.source", "io.sandstack.version" }, keys)
    local RP = P .. "-r"
    local r = assert(docker.start(RP, { from_snapshot = snap, project_name = RP }))
    assert.is_nil(env_text(RP .. "-sandbox"):find("ANTHROPIC_API_KEY=", 1, true), "the restored sandbox has a key it was not given")
    local environ = h.must(("docker exec %s sh -c %s"):format(h.q(RP .. "-sandbox"), h.q("cat " .. h.SERVICE_ENVIRON)))
    assert.matches("PATH=", environ, nil, true) -- the control: the environment was read
    assert.is_nil(environ:find(KEY, 1, true))
    assert.is_nil(h.must("docker inspect " .. h.q(RP .. "-sandbox")):find(KEY, 1, true))
    assert.equal("kept\n", trusted(RP .. "-workspace", "cat /w/kept.txt"))
    assert(r:destroy()); r:close()
    assert(docker.remove_snapshot(snap))
  end)

  it("copies and compares in a helper confined like the sandbox, from an image of sandstack's own", function()
    local s = up(stack, start_err)
    local snap = assert(s:snapshot())
    assert(s:changes { since = snap })
    assert(docker.remove_snapshot(snap))
    local seen = helper_creates(recorder)
    assert.is_true(#seen >= 3, "expected the snapshot's, the restore's and the diff's helpers: saw " .. #seen)
    local allowed = { CHOWN = true, FOWNER = true, FSETID = true, DAC_OVERRIDE = true, DAC_READ_SEARCH = true }
    for _, c in ipairs(seen) do
      local hc = c.body.HostConfig or {}
      assert.same({ "ALL" }, hc.CapDrop, c.name)
      for _, cap in ipairs(hc.CapAdd or {}) do assert.truthy(allowed[cap], c.name .. " adds " .. cap) end
      assert.truthy(table.concat(hc.SecurityOpt or {}, ","):find("no-new-privileges", 1, true), c.name)
      assert.is_true((hc.PidsLimit or 0) > 0 and hc.PidsLimit <= 64, c.name)
      assert.is_true((hc.Memory or 0) > 0, c.name)
      assert.equal("none", hc.NetworkMode, c.name)
      assert.is_true(hc.ReadonlyRootfs, c.name)
      assert.is_falsy(hc.Privileged, c.name)
      -- the stack's own runtime: the sandbox's (a restore's plan names none: the default)
      assert.truthy(hc.Runtime == nil or hc.Runtime == inspect(sbx).HostConfig.Runtime, c.name)
      assert.matches("^sandstack/", c.body.Image, c.name) -- never the snapshot's nor the sandbox's image
      for _, m in ipairs(hc.Mounts or {}) do assert.equal("volume", m.Type, c.name) end
    end
  end)

  it("refuses a volume holding a device node, naming it, and leaves nothing behind", function()
    local s = up(stack, start_err)
    trusted(vol, "mknod /w/null-dev c 1 3", true)
    local before = #assert(docker.snapshots { source = P })
    local snap, err = s:snapshot()
    trusted(vol, "rm -f /w/null-dev", true)
    assert.is_nil(snap)
    assert.equal("invalid", err.kind)
    assert.equal("device_node", err.reason)
    assert.matches("null-dev", err.message, nil, true)
    assert.equal(before, #assert(docker.snapshots { source = P }))
    assert.is_false(inspect(sbx).State.Paused)
  end)

  it("fails a copy past max_pause typed, removes what it made, and resumes the parent within the bound", function()
    local s = up(stack, start_err)
    -- 80000 files and a second of pause: sandstack-tree copies them in a few seconds, so the
    -- deadline comes during the copy (or during the commit before it, on a slow engine: the same
    -- path, err.step says which)
    trusted(vol, "mkdir /w/many && cd /w/many && seq 1 80000 | xargs touch", true)
    local before = #assert(docker.snapshots { source = P })
    local t0 = core.engine_clock()
    local snap, err = s:snapshot { max_pause = 1 }
    local took = core.engine_clock() - t0
    trusted(vol, "rm -rf /w/many", true)
    assert.is_nil(snap, "the copy of 80000 files ended within 1 s: the deadline was not exercised")
    assert.equal("timeout", err.kind)
    assert.equal("deadline", err.reason)
    print(("# the %s passed max_pause; the snapshot returned after %.1f s"):format(err.step, took))
    assert.is_true(took < 30, ("the snapshot returned after %.1f s"):format(took))
    assert.is_false(inspect(sbx).State.Paused)
    local after = assert(docker.snapshots { source = P })
    assert.equal(before, #after, "a snapshot is left: " .. core.json_encode(after))
    no_helper_left(P)
  end)

  it("leaves no helper an engine made after the deadline, nor its volume copy", function()
    local s = up(stack, start_err)
    -- each helper's create reaches the engine 2 s late, a second past max_pause were it sent
    -- while the stack is paused: the engine still makes a helper whose client gave up on it, so
    -- it would come after the rollback, holding the source and its copy (made again)
    local held_name, copy
    finally(function()
      recorder.hold(nil)
      if held_name then eng:call("DELETE", "/containers/" .. held_name, nil, { query = { force = "1" }, ok = { [404] = true } }) end
      if copy then eng:call("DELETE", "/volumes/" .. copy, nil, { ok = { [404] = true } }) end
    end)
    trusted(vol, "mkdir /w/many && cd /w/many && seq 1 80000 | xargs touch", true)
    local before = #assert(docker.snapshots { source = P })
    recorder.hold("/containers/create?name=" .. P .. "-snapshot-copy", 2)
    local t0 = core.engine_clock()
    local snap, err = s:snapshot { max_pause = 1 }
    local took = core.engine_clock() - t0
    recorder.hold(nil)
    trusted(vol, "rm -rf /w/many", true)
    assert.is_nil(snap, "the copy of 80000 files ended within 1 s: the deadline was not exercised")
    assert.equal("deadline", err.reason)
    assert.is_true(took < 30, ("the snapshot returned after %.1f s"):format(took))
    assert.is_false(inspect(sbx).State.Paused)
    h.wait_for("the engine's answer to the held create", function() return #recorder.held() > 0 end, 60)
    held_name = recorder.held()[1]:match("name=([^&]+)")
    for _, c in ipairs(helper_creates(recorder)) do
      for _, m in ipairs(c.name == held_name and c.body.HostConfig.Mounts or {}) do
        if m.Source:find("^snap%-") then copy = m.Source end
      end
    end
    assert.truthy(copy, "the held helper's create names no copy")
    local after = assert(docker.snapshots { source = P })
    assert.equal(before, #after, "a snapshot is left: " .. core.json_encode(after))
    no_helper_left(P)
    assert.equal(404, (eng:request("GET", "/volumes/" .. copy, nil, { raw = true })), "the copy " .. copy .. " is left")
  end)
end)
