-- The one session class (sandstack.session.class): every backend's handle gets its interface
-- methods from it, the backend hands it a driver of what differs. No engine: the handles here are
-- tables over the three backends' method tables, and the calls stop at the class's checks.
local session = require "sandstack.session"
local docker_handle = require "sandstack.docker.handle"
local swarm_handle = require "sandstack.swarm.handle"
local box = require "sandstack.sbx.box"

local SPEC = "spec/session_class_spec.lua"

-- An open handle of each backend, and a closed one of those that close.
local function handles()
  local plan = { project = "p", sandbox = "sandbox", forwarder = "forwarder",
    containers = { { service = "sandbox", name = "p-sandbox" } } }
  return {
    docker = setmetatable({ eng = {}, plan = plan, project = "p", hooks = {} }, docker_handle.Stack),
    swarm = setmetatable({ mgr = {}, node_eng = {}, plan = plan, project = "p", hooks = {} }, swarm_handle.Stack),
    sbx = box.new { backend = {}, name = "b" },
  }
end

local CLASSES = { docker = docker_handle.Stack, swarm = swarm_handle.Stack, sbx = getmetatable(box.new {}).__index }

-- The message a call raised, and whether it names this file at line `line` first.
local function raised_at(line, f)
  local ok, err = pcall(f)
  assert.is_false(ok, "no error was raised")
  assert.is_string(err)
  local prefix = SPEC .. ":" .. line .. ": "
  assert.equal(prefix, err:sub(1, #prefix), "raised at another level: " .. err)
  return err:sub(#prefix + 1)
end

-- The line of the call of here() (each call checked below is no tail call: its frame is the caller).
local function here() return debug.getinfo(2, "l").currentline end

describe("the one session class", function()
  it("gives the three backends' handles the same method set, every method the class's", function()
    local sets = {}
    for name, cls in pairs(CLASSES) do
      local set = {}
      for _, m in ipairs(session.METHODS) do
        local f = rawget(cls, m)
        assert.is_function(f, name .. " lacks " .. m)
        -- a real method is the class's wrapper; a missing one is the class's unsupported stub
        local real = {}
        for _, r in ipairs(session.implemented(cls)) do real[r] = true end
        if real[m] then assert.equal(m, session.class_method(f), name .. "'s " .. m .. " is not the class's") end
        set[#set + 1] = m
      end
      for k, v in pairs(cls) do
        if session.KNOWN[k] then assert.equal(v, rawget(cls, k)) end
      end
      sets[name] = table.concat(set, " ")
    end
    assert.equal(sets.docker, sets.swarm)
    assert.equal(sets.docker, sets.sbx)
    assert.equal(table.concat(session.METHODS, " "), sets.docker)
  end)

  it("answers a method a driver lacks with the typed unsupported, from the class", function()
    local cls = session.class({ backend = "test", ops = { exec = function(_, cmd) return "ran " .. cmd end },
      why = { stats = "read the host's own" }, reopen = "a new test handle", is_open = function(h) return h.open end }, {})
    local h = setmetatable({ open = true }, cls)
    assert.equal("ran true", h:exec("true"))
    for _, m in ipairs(session.METHODS) do
      if m ~= "exec" then
        assert.is_function(cls[m], m)
        local r, err = h[m](h, "x")
        assert.is_nil(r)
        assert.same({ "unsupported", m, "test", m }, { err.kind, err.reason, err.backend, err.method })
      end
    end
    local _, err = h:stats()
    assert.equal("stats is not supported on the test backend; read the host's own", err.message)
    -- whatever the handle's state: the stub looks at nothing
    h.open = false
    _, err = h:logs(42)
    assert.same({ "unsupported", "logs" }, { err.kind, err.reason })
    -- what each real backend lacks answers the same way
    local hs = handles()
    _, err = hs.sbx:logs()
    assert.same({ "unsupported", "logs", "sbx", "logs" }, { err.kind, err.reason, err.backend, err.method })
    _, err = hs.swarm:stop()
    assert.same({ "unsupported", "stop", "swarm", "stop" }, { err.kind, err.reason, err.backend, err.method })
    assert.matches("started once and destroyed", err.message, 1, true)
  end)

  it("refuses a driver that names no session method and a class table that defines one", function()
    assert.has_error(function() session.class({ backend = "t", ops = { record = function() end } }, {}) end,
      "sandstack.session.class: record is no session method (put it on the class table)")
    assert.has_error(function() session.class({ backend = "t", ops = {} }, { exec = function() end }) end,
      "sandstack.session.class: the t handle defines exec itself (put it in the driver's ops)")
  end)

  it("says the one closed sentence for every method of a closed handle, at the caller's line", function()
    local reopen = { docker = "sandstack.docker.reconnect or open", swarm = "sandstack.swarm.reconnect" }
    for name, h in pairs(handles()) do
      if reopen[name] then
        h.eng, h.mgr = nil, nil
        local real = {}
        for _, m in ipairs(session.implemented(CLASSES[name])) do real[m] = true end
        for _, m in ipairs(session.METHODS) do
          if real[m] then
            local line = here() + 1
            local msg = raised_at(line, function() local _ = h[m](h, "/x", {}) end)
            assert.equal("the stack handle is closed: make a new one with " .. reopen[name], msg, name .. " " .. m)
          end
        end
      end
    end
    -- the class is the one place: a test driver's closed handle says the same sentence
    local cls = session.class({ backend = "test", ops = { egress = function() return {} end }, reopen = "test.open",
      is_open = function() return false end }, {})
    local h = setmetatable({}, cls)
    local line = here() + 1
    local msg = raised_at(line, function() local _ = h:egress() end)
    assert.equal("the stack handle is closed: make a new one with test.open", msg)
  end)

  it("raises a programming error at the caller's line, the same on every backend", function()
    local says = { docker = "an absolute path in the container", swarm = "an absolute path in the container",
      sbx = "a path in the workspace" }
    for name, h in pairs(handles()) do
      local line = here() + 1
      local msg = raised_at(line, function() local _ = h:read(42) end)
      assert.equal("read: argument 'path' must be " .. says[name] .. ", got number", msg, name)
      line = here() + 1
      msg = raised_at(line, function() local _ = h:exec(42) end)
      assert.equal("exec: argument 'cmd' must be a non-empty list of strings or a string, got number", msg, name)
      line = here() + 1
      msg = raised_at(line, function() local _ = h:list("/x", 5) end)
      assert.equal("list: options must be a table", msg:sub(1, #"list: options must be a table"), name)
      line = here() + 1
      msg = raised_at(line, function() local _ = h.stat("/x") end)
      assert.equal("stat: call it on a handle, as h:stat(...)", msg, name)
    end
  end)
end)
