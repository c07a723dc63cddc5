-- Readiness by a log line or an open port (ready.<service>.log / .port), beside the healthcheck
-- and the HTTP path, on real stacks (#docker): a dependent starts only once its dependency's
-- log showed the text (so many times) and its port accepts; a text or a port that never comes is
-- a typed timeout naming it, a service that exits ends the wait, and ready_path = false starts
-- an agent that does not speak HTTP. Projects start "sandstack-sstest-waits-"; the first two tests
-- share one stack; each checks that nothing of its stack is left.
local sandstack = require "sandstack"
local h = require "helpers"

local AGENT, SOCAT = "sandstack-test/agent:local", "sandstack-test/socat:local"
local eng = assert(sandstack.engine {})

local function base(services, extra)
  local o = { agent_port = 8080, forwarder_image = SOCAT, pull = "never", subnet_pool = "10.215.0.0/16",
    services = services }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function sandbox(deps) return { name = "sandbox", image = AGENT, command = { "agent" }, depends_on = deps } end

-- start(opts, on_healthy) -> stack, err, events ({ phase, service, by, t }: t seconds since the
-- call); on_healthy(service, project) runs at each "healthy" event, while the start waits on it.
local function start(opts, on_healthy)
  local key = "sstest-waits-" .. h.random_suffix(3)
  local events, t0 = {}, sandstack.core.engine_clock()
  opts.on_event = function(e)
    events[#events + 1] = { phase = e.phase, service = e.service, by = e.by, t = sandstack.core.engine_clock() - t0 }
    if e.phase == "healthy" and on_healthy then on_healthy(e.service, "sandstack-" .. key) end
  end
  local stack, err = sandstack.docker.start(key, opts)
  return stack, err, events, "sandstack-" .. key
end

local function at(events, phase, service)
  for _, e in ipairs(events) do if e.phase == phase and e.service == service then return e end end
end

local function nothing_left(project)
  assert.equal(0, h.count_labelled(eng, project))
end

describe("readiness by a log line or an open port #docker", function()
  -- one stack for the first two tests: db ready by a text seen twice, web by its port
  local stack, err, events, project
  -- what holds at the moment each is reported ready, looked at from outside the wait
  local seen = {}

  -- how many times db's log (all its starts) holds the text
  local function db_texts(proj)
    local l = assert(eng:demux("/containers/" .. proj .. "-db/logs", { query = { stdout = "1", stderr = "1" } }))
    return select(2, (l.stdout .. l.stderr):gsub("ready to accept", ""))
  end

  setup(function()
    local function on_healthy(service, proj)
      if service == "db" then
        seen.db = db_texts(proj)
      elseif service == "web" then
        local r = assert(eng:exec(proj .. "-web", { "agent", "connect", "127.0.0.1", "9000", "1000" }))
        seen.web = r.exit_code
      end
    end
    stack, err, events, project = start(base({
      sandbox { "db", "web" },
      -- the text once early, then a second time a second later
      { name = "db", image = AGENT, egress = "none",
        command = { "sh", "-c", "echo 'db: ready to accept'; sleep 1; echo 'db: ready to accept' >&2; sleep 3600" } },
      -- listens on 9000 only after 1.5 s
      { name = "web", image = AGENT, egress = "none", env = { AGENT_PORT = "9000" },
        command = { "sh", "-c", "sleep 1.5; exec agent" } },
    }, { ready = { db = { log = "ready to accept", times = 2 }, web = { port = 9000 } } }), on_healthy)
  end)

  teardown(function()
    if stack then assert(stack:destroy()) end
    nothing_left(project)
  end)

  it("starts the dependent only once the log showed the text twice and the port accepts", function()
    assert(stack, tostring(err))
    local db, web, sb = at(events, "healthy", "db"), at(events, "healthy", "web"), at(events, "container_started", "sandbox")
    assert(db and web and sb, "events: healthy db, healthy web, sandbox started")
    assert.equal("log", db.by)
    assert.equal("port", web.by)
    -- reported once the text was there twice (not at the first line), and the port open
    assert.is_true(seen.db >= 2, ("db reported ready with the text %s times in its log"):format(tostring(seen.db)))
    assert.equal(0, seen.web, "web reported ready with nothing listening on 9000")
    assert.is_true(sb.t >= db.t and sb.t >= web.t, "the sandbox started after both were ready")
    -- the port really accepts from the stack's network when it is reported
    local r = assert(stack:exec({ "agent", "connect", "web", "9000", "2000" }))
    assert.equal(0, r.code)
  end)

  it("a restart, from the stack's record, waits for them again", function()
    assert(stack, tostring(err))
    local again_events, texts = {}, nil
    -- from its record, as another process would: the record keeps what the start waits for
    local again = assert(sandstack.docker.reconnect(stack:record(), { on_event = function(e)
      again_events[#again_events + 1] = e
      if e.phase == "healthy" and e.service == "db" then texts = db_texts(project) end
    end }))
    local ok, aerr = pcall(function()
      assert(again:restart { timeout = 0 })
      local by = {}
      for _, e in ipairs(again_events) do if e.phase == "healthy" then by[e.service] = e.by end end
      assert.same({ db = "log", web = "port" }, by, "the restart waited for db's text and web's port")
      -- twice from the first start, and twice again since the restart (the first start's lines do not count)
      assert.is_true(texts >= 4, ("db reported ready with the text %d times in its log"):format(texts))
    end)
    again:close()
    assert(ok, aerr)
  end)

  it("a text that never comes is a health timeout naming it, and nothing is left", function()
    local stack, err, events, project = start(base({
      sandbox { "db" },
      { name = "db", image = AGENT, egress = "none", command = { "sh", "-c", "echo 'almost ready'; sleep 3600" } },
    }, { health_timeout = 2, ready = { db = { log = "ready now" } } }))
    assert.is_nil(stack)
    assert.equal("timeout", err.kind)
    assert.equal("health", err.phase)
    assert.equal("db", err.service)
    assert.matches('its log did not show "ready now"', err.message, 1, true)
    assert.is_nil(at(events, "container_started", "sandbox"))
    nothing_left(project)
  end)

  it("a port that never opens is a health timeout naming it", function()
    local stack, err, _, project = start(base({
      sandbox { "web" },
      { name = "web", image = AGENT, egress = "none", env = { AGENT_PORT = "9001" }, command = { "agent" } },
    }, { health_timeout = 2, ready = { web = { port = 9000 } } }))
    assert.is_nil(stack)
    assert.equal("timeout", err.kind)
    assert.matches("nothing accepted a connection on web:9000", err.message, 1, true)
    nothing_left(project)
  end)

  it("a service that exits while waited for ends the wait with its exit", function()
    local stack, err, events, project = start(base({
      sandbox { "db" },
      { name = "db", image = AGENT, egress = "none", command = { "sh", "-c", "echo starting; sleep 0.5; exit 4" } },
    }, { health_timeout = 30, ready = { db = { log = "never" } } }))
    assert.is_nil(stack)
    assert.equal("exited", err.kind)
    assert.equal(4, err.exit_code)
    local failed, started = at(events, "failed"), at(events, "container_started", "db")
    assert.is_true(failed.t - started.t < 15, ("the wait ended %.1fs after db's start, not at the 30 s "
      .. "health_timeout"):format(failed.t - started.t))
    nothing_left(project)
  end)

  it("reads the text as plain bytes, not as a pattern", function()
    local stack, err, _, project = start(base({
      sandbox { "db" },
      { name = "db", image = AGENT, egress = "none", command = { "sh", "-c", "echo 'listening on 5432'; sleep 3600" } },
    }, { health_timeout = 2, ready = { db = { log = "listening on %d+" } } }))
    assert.is_nil(stack)
    assert.equal("timeout", err.kind)
    nothing_left(project)
  end)

  it("ready_path = false starts an agent that does not speak HTTP, ready by its port", function()
    -- socat answering every connection with a line: no HTTP at all
    local stack, err, events, project = start({ agent_port = 7000, forwarder_image = SOCAT, pull = "never",
      subnet_pool = "10.215.0.0/16", ready_path = false, ready_timeout = 3, ready = { sandbox = { port = 7000 } },
      services = { { name = "sandbox", image = SOCAT, entrypoint = { "socat" },
        command = { "TCP-LISTEN:7000,fork,reuseaddr", "SYSTEM:echo hello" } } } })
    assert(stack, tostring(err))
    local ok, aerr = pcall(function()
      assert.equal("port", at(events, "healthy", "sandbox").by)
      local out = h.must("socat -u TCP:127.0.0.1:" .. stack.port .. " STDOUT")
      assert.equal("hello\n", out)
    end)
    assert(stack:destroy())
    nothing_left(project)
    assert(ok, aerr)
  end)
end)
