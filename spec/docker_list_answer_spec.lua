-- An Engine list answer of the wrong shape (a JSON object where an array belongs) is an error,
-- engine/bad_answer, in every caller that lists: docker.list, reap, down, a pool's acquire and
-- the gateway's re-adoption. Read as an empty list it would make reap and down see
-- nothing to remove and adoption forget every session. The engine is the engine double with label
-- lists chosen per test (spec/support/engine_double.py, mode lists); no Docker needed.
local sandstack = require "sandstack"
local docker = sandstack.docker
local worker = require "sandstack.gateway.worker"
local adoption = require "sandstack.gateway.adoption"

local OBJECT = '{"message":"page 1 of 3","Containers":[{"Id":"c1"}]}'

describe("a malformed Engine list answer", function()
  local fake, host

  setup(function()
    fake = require("engine_double").start("lists")
    host = fake.host
  end)

  teardown(function() if fake then fake.stop() end end)

  local function answer(what, text) fake.answer(what, text) end -- text nil: the fake's own (empty lists)

  local function deletes() return fake.deletes() end

  before_each(function() fake.reset() end)

  local function bad_answer(v, err, what)
    assert.is_nil(v, what)
    assert.equal("engine", err and err.kind, what .. ": " .. tostring(err and err.message))
    assert.equal("bad_answer", err.reason, what .. ": " .. tostring(err.message))
  end

  -- A stack of project p as the engine lists it: one labelled container.
  local function one_stack(p)
    return ('[{"Id":"id-%s","Names":["/%s-sandbox"],"State":"running","Image":"x","Labels":'
      .. '{"io.sandstack.project":"%s","io.sandstack.service":"sandbox"}}]'):format(p, p, p)
  end

  it("docker.list refuses an object for each of its three lists", function()
    local cases = {
      { "containers", OBJECT }, { "networks", '{"Name":"n1"}' },
      { "volumes", '[{"Name":"v1"}]' }, { "volumes", '{"Volumes":{"Name":"v1"}}' }, { "containers", '"none"' },
    }
    for _, c in ipairs(cases) do
      answer(c[1], c[2])
      local stacks, err = docker.list { docker_host = host, timeout = 5 }
      bad_answer(stacks, err, c[1] .. " = " .. c[2])
      answer(c[1], nil)
    end
    -- the controls: empty lists are no stacks; a labelled container is one stack
    assert.same({}, assert(docker.list { docker_host = host, timeout = 5 }))
    answer("volumes", '{"Volumes":null,"Warnings":null}')
    answer("containers", one_stack("p1"))
    local stacks = assert(docker.list { docker_host = host, timeout = 5 })
    assert.equal(1, #stacks)
    assert.equal("p1", stacks[1].project)
  end)

  it("docker.list takes a pooled stack's birth from any of its objects, and no marker for a service", function()
    -- as the engine lists them, newest first: the claimed ready mark and a gateway's marker carry
    -- no io.sandstack.created, the stack's own containers do
    answer("containers", '[{"Id":"m","Names":["/p2-claim"],"State":"created","Image":"x","Labels":'
      .. '{"io.sandstack.project":"p2","io.sandstack.pool":"pl","io.sandstack.role":"ready"}},'
      .. '{"Id":"g","Names":["/p2-gw"],"State":"created","Image":"x","Labels":'
      .. '{"io.sandstack.project":"p2","io.sandstack.role":"gateway"}},'
      .. '{"Id":"s","Names":["/p2-sandbox"],"State":"running","Image":"x","Labels":{"io.sandstack.project":"p2",'
      .. '"io.sandstack.pool":"pl","io.sandstack.service":"sandbox","io.sandstack.created":"1700000000"}}]')
    local stacks = assert(docker.list { docker_host = host, timeout = 5 })
    answer("containers", nil)
    assert.equal(1, #stacks)
    assert.equal(1700000000, stacks[1].created)
    assert.same({ sandbox = "running" }, stacks[1].services)
    assert.equal("in_use", stacks[1].state)
  end)

  it("reap and down say so, and remove nothing", function()
    answer("containers", OBJECT)
    local reaped, rerr = docker.reap { docker_host = host, timeout = 5, all = true }
    bad_answer(reaped, rerr, "reap")
    local ok, err = docker.down("p1", { docker_host = host, timeout = 5 })
    bad_answer(ok, err, "down")
    answer("containers", nil)
    answer("networks", '{"Name":"p1_default"}')
    ok, err = docker.down("p1", { docker_host = host, timeout = 5 })
    bad_answer(ok, err, "down with a malformed network list")
    assert.equal("", deletes())
    -- the control: with a well-formed list, reap and down remove the stack's container
    answer("networks", nil)
    answer("containers", one_stack("p1"))
    assert.same({ "p1" }, assert(docker.reap { docker_host = host, timeout = 5, all = true }))
    assert.truthy(deletes():find("/containers/id-p1", 1, true), deletes())
    fake.forget()
    assert.is_true(docker.down("p1", { docker_host = host, timeout = 5 }))
    assert.truthy(deletes():find("/containers/id-p1", 1, true), deletes())
  end)

  it("reap with no filter removes nothing and asks for all = true, as the CLI asks for --all", function()
    answer("containers", one_stack("p1"))
    for _, o in ipairs { { docker_host = host, timeout = 5 }, { docker_host = host, timeout = 5, all = false } } do
      local removed, err = docker.reap(o)
      assert.is_nil(removed)
      assert.equal("invalid", err and err.kind, tostring(err))
      assert.equal("filter_required", err.reason)
      assert.truthy(err.message:find("all = true", 1, true), err.message)
    end
    assert.equal("", deletes())
    local ok, msg = pcall(docker.reap, { docker_host = host, timeout = 5, all = "yes" })
    assert.is_false(ok)
    assert.matches("sandstack.docker.reap: option 'all' must be a boolean, got string", msg, 1, true)
    assert.equal("", deletes())
    -- the control: a filter, or all = true, removes the stack
    assert.same({ "p1" }, assert(docker.reap { docker_host = host, timeout = 5, prefix = "p" }))
    assert.truthy(deletes():find("/containers/id-p1", 1, true), deletes())
  end)

  it("a pool's acquire says so, before it claims or starts anything", function()
    local pool = assert(docker.pool { name = "lp", size = 0, max = 1, stack = {
      docker_host = host, timeout = 5, agent_port = 8080, forwarder_image = "f:local",
      services = { { name = "sandbox", image = "x:local" } } } })
    answer("containers", OBJECT)
    local stack, err = pool:acquire("s1")
    bad_answer(stack, err, "pool:acquire")
    local requests = fake.lists()
    assert.equal(1, select(2, requests:gsub("\n", "")), requests) -- the list, and nothing after it
    if pool.eng then pool.eng:close() end
  end)

  it("the gateway's re-adoption says so (and is retried), never adopting nothing", function()
    answer("containers", OBJECT)
    local ok, err = worker.adopt { node = "n1", prefix = "gw-", keep = {}, docker_host = host, timeout = 5 }
    assert.is_false(ok)
    assert.equal("engine", err.kind, err.message)
    assert.equal("bad_answer", err.reason, err.message)
    -- adoption.run, as worker 0's timer calls it, fails: start() then logs and tries again
    local dict = { get_keys = function() return {} end }
    local G = { dict = dict, conf = { name = "n1", project_prefix = "gw-", stack = { docker_host = host, timeout = 5 } },
      run = function(fn, ...) return worker[fn](...) end }
    local done, rerr = adoption.run(G)
    assert.is_nil(done)
    assert.equal("bad_answer", rerr.reason)
    -- the control: a well-formed empty list is an adoption with nothing to restore
    answer("containers", "[]")
    local ok2, res = worker.adopt { node = "n1", prefix = "gw-", keep = {}, docker_host = host, timeout = 5 }
    assert.is_true(ok2)
    assert.same({}, res.sessions)
  end)
end)
