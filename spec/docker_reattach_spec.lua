-- Reattaching to a spawned process by its id after the caller lost it (#docker): h:processes()
-- lists the live spawned processes (id, argv, started, service, tty) from the engine, so any
-- process sees them; h:attach(id) gives back the handle's own process with its output, or, from
-- another handle, a process whose wait, kill and resize work and whose stdin and output are
-- typed unsupported/detached (the Engine API cannot attach to a running exec a second time).
-- One stack for the file (project "sandstack-sstest-reattach-*"), destroyed at the end with
-- nothing left.
local sandstack = require "sandstack"
local h = require "helpers"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local eng = assert(sandstack.engine {})

-- The spawn entries the engine holds for project (volumes with role spawn).
local function entries(project)
  local v = assert(eng:call("GET", "/volumes", nil, { query = { filters = { label = {
    "io.sandstack.project=" .. project, "io.sandstack.role=spawn" } } } }))
  return #(v.Volumes or {})
end

local function ids(list) return h.index_by(list, "id") end

describe("processes and attach #docker", function()
  local stack

  setup(function()
    stack = assert(sandstack.docker.start("sstest-reattach-" .. h.random_suffix(3), { agent_port = 8080,
      forwarder_image = SOCAT, pull = "never", subnet_pool = "10.215.0.0/16",
      services = { { name = "sandbox", image = AGENT, command = { "agent" } },
        { name = "db", image = AGENT, command = { "agent" }, egress = "none" } } }))
  end)

  teardown(function()
    if stack then
      local project = stack.project
      assert(stack:destroy())
      assert.equal(0, h.count_labelled(eng, project)) -- the entries went with the stack
    end
  end)

  it("lists the live spawned processes with their id, argv, start, service and tty", function()
    local t0 = os.time()
    local a = assert(stack:spawn({ "cat" }))
    local b = assert(stack:spawn("sleep 300", { tty = true, service = "db" }))
    local got = ids(assert(stack:processes()))
    assert.same({ "cat" }, got[a.id].argv)
    assert.same({ "sh", "-c", "sleep 300" }, got[b.id].argv)
    assert.equal("sandbox", got[a.id].service)
    assert.equal("db", got[b.id].service)
    assert.is_false(got[a.id].tty)
    assert.is_true(got[b.id].tty)
    assert.is_true(got[a.id].started >= t0 and got[a.id].started <= os.time())
    -- exec's own processes are not spawns of the session
    assert(stack:exec({ "true" }))
    assert.equal(2, #assert(stack:processes()))
    assert(b:kill("KILL"))
    assert.equal(137, b:wait(10))
    b:close()
    a:close()
  end)

  it("gives back this handle's own process by its id, its output still to read", function()
    local id
    do -- the caller keeps only the id
      local p = assert(stack:spawn({ "sh", "-c", "echo early; cat" }))
      id = p.id
    end
    collectgarbage()
    collectgarbage()
    local p = assert(stack:attach(id))
    assert.is_nil(p.detached)
    local data = assert(p:read(5))
    assert.equal("early\n", data)
    assert(p:write("again\n"))
    assert.equal("again\n", (p:read(5)))
    assert(p:close_stdin())
    assert.equal(0, p:wait(10))
    p:close()
  end)

  it("from another handle, attaches for wait, kill and resize; stdin and output are detached", function()
    local p = assert(stack:spawn({ "sh" }, { tty = true, cols = 80, rows = 24 }))
    local other = assert(sandstack.docker.reconnect(stack:record()))
    local ok, err = pcall(function()
      local listed = ids(assert(other:processes()))
      assert(listed[p.id], "another handle lists it")
      local a = assert(other:attach(p.id))
      assert.is_true(a.detached)
      assert.same({ "sh" }, a.argv)
      local _, rerr = a:read(1)
      assert.equal("unsupported", rerr.kind)
      assert.equal("detached", rerr.reason)
      local _, werr = a:write("x")
      assert.equal("detached", werr.reason)
      assert(a:resize(120, 40))
      assert(p:write("stty size\n"))
      local seen = ""
      h.wait_for("stty size after the resize", function()
        seen = seen .. (p:read(1) or "")
        return seen:find("40 120", 1, true)
      end, 10)
      assert(a:kill("KILL"))
      assert.equal(137, a:wait(10))
      assert.is_nil(ids(assert(other:processes()))[p.id])
    end)
    other:close()
    p:close()
    assert(ok, err)
  end)

  it("an ended process leaves the list and the engine; an unknown id is typed", function()
    local before = entries(stack.project)
    local p = assert(stack:spawn({ "true" }))
    assert.equal(before + 1, entries(stack.project))
    assert.equal(0, p:wait(10)) -- the spawner saw the end: its entry goes
    assert.equal(before, entries(stack.project))
    p:close()
    -- one whose spawner went away without waiting: the next listing removes it
    local q = assert(stack:spawn({ "sh", "-c", "exit 3" }))
    q:close()
    h.wait_for("the exec's end", function()
      local info = assert(eng:call("GET", "/exec/" .. q.id .. "/json"))
      return info.Running == false
    end, 10)
    assert.is_nil(ids(assert(stack:processes()))[q.id])
    assert.equal(before, entries(stack.project))
    local none, err = stack:attach("0123456789abcdef")
    assert.is_nil(none)
    assert.equal("invalid", err.kind)
    assert.equal("unknown_process", err.reason)
    assert.has_error(function() stack:attach(42) end)
  end)
end)
