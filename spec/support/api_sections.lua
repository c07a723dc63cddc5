-- How each options table of the reference is reached in the code: SECTIONS[id]() is the very
-- table its validator checks with, name -> entry (an entry is `true`, a type, bounds, or a row
-- of sandstack.error's `described` table, which also holds the reference's cells). Shared by
-- spec/docs_api_spec.lua (the names, both ways; the tables as scripts/api_tables.lua writes them)
-- and scripts/api_tables.lua (the generator).
--
-- A Lua check goes through core.check_keys: the wrapper below hands back the table it was given
-- (and stops the call there). The start options' C validator: its key lists and the rows
-- core.stack_options gives (both from csrc/stack/options.h); eng:exec's, core.exec_options. To document a new function or method: write its section with the
-- marker `<!-- api: ID -->` and the table's header, and add one line to SECTIONS saying how to
-- reach its options check.
local core = require "sandstack.core"

-- The wrapper must be in place before any module captures core.check_keys (sandstack.error
-- copies it when first loaded), so the modules are loaded afresh after it.
local real_check_keys = core.check_keys
local probing, seen = nil, nil
local STOP = setmetatable({}, { __tostring = function() return "options check reached" end })
core.check_keys = function(opts, allowed, what)
  if probing then
    probing.n = probing.n - 1
    if probing.n == 0 then
      seen = allowed
      error(STOP, 0)
    end
  end
  return real_check_keys(opts, allowed, what)
end
for name in pairs(package.loaded) do
  if name:match("^sandstack") and name ~= "sandstack.core" then package.loaded[name] = nil end
end
local sandstack = require "sandstack"

-- The key set the nth (default first) options check reached by f(made) was given;
-- made is what make() returns, called before the probing starts (an object to call a method on).
local function probe(f, nth, make)
  return function()
    local made = make and make()
    probing, seen = { n = nth or 1 }, nil
    local ok, err = pcall(f, made)
    probing = nil
    if ok or err ~= STOP then error("the call reached no options check: " .. tostring(err), 0) end
    return seen
  end
end

-- A level of the start options' C validator: the names it accepts (its key list), each with the
-- row core.stack_options gives for it (both expand csrc/stack/options.h); a name without a row
-- stays `true`, which the generator refuses.
-- C's rows (core.stack_options, core.exec_options) as described entries: name -> entry.
local function c_rows(list)
  local rows = {}
  for i, r in ipairs(list) do
    rows[r.name] = { names = { r.name }, type = r.type, default = r.default, refused = r.refused, order = i }
  end
  return rows
end

local function stack_level(level)
  return function()
    local rows, set = c_rows(core.stack_options(level)), {}
    for _, k in ipairs(require("sandstack_test.stack").option_keys(level)) do set[k] = rows[k] or true end
    for name in pairs(rows) do
      if not set[name] then error(("core.stack_options(%q) has a row for %s, which the validator does not accept"):format(level, name), 0) end
    end
    return set
  end
end

-- A method table from the upvalue of a module function that builds its objects.
local function class_of(fn, name)
  for i = 1, 200 do
    local n, v = debug.getupvalue(fn, i)
    if n == nil then break end
    if n == name then return v end
  end
  error("no upvalue " .. name)
end

-- The keys of a set named `name` among the upvalues of fn, or of a function among them (a
-- validator that checks its keys itself rather than through core.check_keys).
local function upvalue_keys(fn, name)
  local function find(f, depth)
    for i = 1, 200 do
      local n, v = debug.getupvalue(f, i)
      if n == nil then break end
      if n == name and type(v) == "table" then return v end
      if depth > 0 and type(v) == "function" then
        local t = find(v, depth - 1)
        if t then return t end
      end
    end
  end
  return function()
    return assert(find(fn, 2), "no upvalue " .. name)
  end
end

local function docker_stack()
  local cls = class_of(require("sandstack.docker.handle").new, "Stack")
  return setmetatable({ eng = {}, plan = {}, hooks = {} }, cls)
end

local function docker_pool()
  return assert(sandstack.docker.pool { name = "docs-probe", stack = { agent_port = 8080, image = "x" } })
end

local function sbx_box()
  return require("sandstack.sbx.box").new({})
end

local function engine_method(part, name)
  return function(...)
    local fake = { _h = {}, _subs = {}, _failed = {}, _pending = 0, timeout = 1, api_version = "1.41" }
    return require("sandstack.engine." .. part).methods[name](fake, ...)
  end
end

local SECTIONS = {
  -- sandstack.docker (docs/api/docker.md)
  ["sandstack.docker.start"] = stack_level("start"),
  ["sandstack.docker.start services"] = stack_level("service"),
  ["sandstack.docker.start services volumes"] = stack_level("mount"),
  ["sandstack.docker.start volumes"] = stack_level("volume"),
  ["sandstack.docker.start ready"] = stack_level("ready"),
  ["sandstack.docker.start ports"] = stack_level("port"),
  ["sandstack.docker.start network"] = stack_level("network"),
  ["sandstack.docker.start credentials"] = stack_level("credential"),
  ["sandstack.docker.reconnect"] = probe(function() sandstack.docker.reconnect({ project = "p" }, {}) end),
  ["sandstack.docker.list"] = probe(function() sandstack.docker.list {} end),
  ["sandstack.docker.reap"] = probe(function() sandstack.docker.reap {} end),
  ["sandstack.docker.down"] = probe(function() sandstack.docker.down("p", {}) end),
  ["sandstack.docker.build_images"] = probe(function() sandstack.docker.build_images {} end),
  ["sandstack.docker.pool"] = probe(function() sandstack.docker.pool { name = "p", stack = {} } end),
  ["sandstack.docker.pool credentials"] = upvalue_keys(require("sandstack.docker.pool_slots").prepare, "SLOT_FIELDS"),
  ["pool:fill"] = probe(function(pool) pool:fill {} end, 1, docker_pool),
  ["pool:serve"] = probe(function(pool) pool:serve {} end, 1, docker_pool),
  ["stack:stop"] = probe(function() docker_stack():stop {} end),
  ["stack:start"] = probe(function() docker_stack():start {} end),
  ["stack:restart"] = probe(function() docker_stack():restart {} end),
  ["stack:capture"] = probe(function() docker_stack():capture("/nonexistent", {}) end),
  ["stack:destroy"] = probe(function() docker_stack():destroy {} end),
  -- the session interface (docs/api/session.md), on the docker handle
  ["h:exec"] = probe(function() docker_stack():exec({ "true" }, {}) end),
  ["h:spawn"] = probe(function() docker_stack():spawn({ "true" }, {}) end),
  ["h:read"] = probe(function() docker_stack():read("/x", {}) end),
  ["h:write"] = probe(function() docker_stack():write("/x", "", {}) end),
  ["h:upload"] = probe(function() docker_stack():upload("/nonexistent", "/x", {}) end),
  ["h:download"] = probe(function() docker_stack():download("/x", "/nonexistent", {}) end),
  ["h:stat"] = probe(function() docker_stack():stat("/x", {}) end),
  ["h:list"] = probe(function() docker_stack():list("/x", {}) end),
  ["h:remove"] = probe(function() docker_stack():remove("/x", {}) end),
  ["h:logs"] = probe(function() docker_stack():logs {} end),
  ["h:stats"] = probe(function() docker_stack():stats {} end),
  ["h:hibernate"] = probe(function() docker_stack():hibernate {} end),
  ["h:snapshot"] = probe(function() docker_stack():snapshot {} end),
  ["h:changes"] = probe(function() docker_stack():changes {} end),
  ["h:answer"] = probe(function() docker_stack():answer(1, "allow", {}) end),
  ["h:serve"] = probe(function() docker_stack():serve(0, {}) end),
  ["sandstack.docker.start session"] = function()
    return require("sandstack.docker.session_methods").START_KEYS
  end,
  ["sandstack.docker.snapshots"] = probe(function() sandstack.docker.snapshots {} end),
  ["sandstack.docker.remove_snapshot"] = probe(function() sandstack.docker.remove_snapshot({}, {}) end),
  -- sandstack.engine (docs/api/engine.md)
  ["sandstack.engine"] = probe(function() sandstack.engine {} end),
  ["sandstack.engine tls"] = probe(function() sandstack.engine { tls = {} } end, 2),
  ["eng:request"] = probe(function() engine_method("requests", "request")("GET", "/x", nil, {}) end),
  ["eng:call"] = probe(function() engine_method("requests", "call")("GET", "/x", nil, { headers = {} }) end),
  ["eng:submit"] = probe(function() engine_method("requests", "submit")("GET", "/x", nil, { headers = {} }) end),
  -- eng:exec's check is in C: its key list and these rows expand one list (engine_exec_options.h)
  ["eng:exec"] = function() return c_rows(core.exec_options()) end,
  ["eng:download"] = probe(function() engine_method("stream", "download")("/x", "/nonexistent", {}) end),
  ["eng:events"] = probe(function() engine_method("stream", "events")({}) end),
  -- sandstack.sbx (docs/api/sbx.md)
  ["sandstack.sbx.backend"] = probe(function() sandstack.sbx.backend {} end),
  ["backend:acquire"] = upvalue_keys(class_of(sandstack.sbx.backend, "Backend").acquire, "acquire_keys"),
  ["box:exec"] = probe(function() sbx_box():exec({ "true" }, {}) end),
  ["box:remove"] = probe(function() sbx_box():remove("x", {}) end),
  ["box:reclaim"] = probe(function() sbx_box():reclaim("x", {}) end),
  -- sandstack.swarm (docs/api/swarm.md): start takes sandstack.docker.start's options and these
  ["sandstack.swarm.start"] = upvalue_keys(require("sandstack.swarm.start").start, "SWARM_KEYS"),
  ["sandstack.swarm.reconnect"] = probe(function() sandstack.swarm.reconnect({ project = "p", kind = "sandstack.swarm" }, {}) end),
  ["sandstack.swarm.list"] = probe(function() sandstack.swarm.list {} end),
  ["sandstack.swarm.reap"] = probe(function() sandstack.swarm.reap {} end),
  -- the gateway's configuration file (docs/gateway.md): its check's set of keys
  ["gateway config"] = function() return require("sandstack.gateway.config").KEYS end,
}

return SECTIONS
