-- The gateway's OpenAPI document (gateway/openapi.lua, served at GET /openapi.json) held to the
-- gateway: its structure is a valid OpenAPI 3.1 description a client generator takes (every
-- reference resolves, every path parameter is declared, operation ids are unique), every
-- documented path is routed by a location nginx_conf.lua renders (not the catch-all) and every
-- location but the console's is documented, the lifecycle verbs and ask routes are the handlers'
-- own, and (#nginx #docker) a live gateway serves it and answers each documented request from
-- its handler: 401 exactly where the document asks for a credential, 405 for a method the
-- document does not list on a route the gateway owns.
local core = require "sandstack.core"
local h = require "helpers"
local openapi = require "sandstack.gateway.openapi"
local gh = require "gateway_harness"

local METHODS = { get = true, put = true, post = true, delete = true, options = true, head = true, patch = true,
  trace = true }

-- A checked gateway config of that backend (a swarm's names a manager; nothing connects to it).
local function config_of(backend)
  if backend == "docker" then return gh.config {} end
  return gh.config { backend = "swarm", swarm = { node = "n1" }, console = false,
    stack = gh.stack_options { docker_host = "tcp://127.0.0.1:2376" } }
end

local function doc_of(backend)
  local text = openapi.json(config_of(backend))
  return assert(core.json_decode(text)), text
end

-- The value a JSON pointer "#/a/b" names in doc, or nil.
local function resolve(doc, ref)
  local v = doc
  for part in ref:gsub("^#/", ""):gmatch("[^/]+") do
    if type(v) ~= "table" then return nil end
    v = v[part]
  end
  return v
end

-- Every problem of doc as a client generator would meet it; {} when there is none.
local function problems(doc, text)
  local out = {}
  local function bad(fmt, ...) out[#out + 1] = fmt:format(...) end
  if doc.openapi ~= "3.1.0" then bad("openapi is %s", tostring(doc.openapi)) end
  if type(doc.info) ~= "table" or type(doc.info.title) ~= "string" or type(doc.info.version) ~= "string" then
    bad("info needs a title and a version")
  end
  -- a Lua {} would encode as an object where OpenAPI wants a list
  if text:find("{}", 1, true) then bad("an empty object in the text (an empty list encoded as {})") end
  local schemes = doc.components and doc.components.securitySchemes or {}
  local ids = {}
  for path, item in pairs(doc.paths) do
    if path:sub(1, 1) ~= "/" then bad("path %s does not start with /", path) end
    local templ = {}
    for name in path:gmatch("{([^}]+)}") do templ[name] = true end
    local declared_at_path = {}
    for _, p in ipairs(item.parameters or {}) do if p["in"] == "path" then declared_at_path[p.name] = true end end
    for method, o in pairs(item) do
      if method ~= "parameters" then
        if not METHODS[method] then bad("%s: %s is not an HTTP method", path, method) end
        if type(o.operationId) ~= "string" or not o.operationId:match("^%a%w*$") then
          bad("%s %s: operationId %s", method, path, tostring(o.operationId))
        elseif ids[o.operationId] then
          bad("operationId %s twice", o.operationId)
        end
        ids[o.operationId or ""] = true
        local declared = {}
        for k in pairs(declared_at_path) do declared[k] = true end
        for _, p in ipairs(o.parameters or {}) do
          if p["in"] == "path" then
            declared[p.name] = true
            if p.required ~= true then bad("%s %s: path parameter %s is not required", method, path, p.name) end
          elseif p["in"] ~= "query" and p["in"] ~= "header" then
            bad("%s %s: parameter %s in %s", method, path, tostring(p.name), tostring(p["in"]))
          end
          if type(p.schema) ~= "table" then bad("%s %s: parameter %s has no schema", method, path, tostring(p.name)) end
        end
        for name in pairs(templ) do
          if not declared[name] then bad("%s %s: {%s} is not declared", method, path, name) end
        end
        for name in pairs(declared) do
          if not templ[name] then bad("%s %s: %s is declared but not in the path", method, path, name) end
        end
        if type(o.responses) ~= "table" or next(o.responses) == nil then bad("%s %s: no responses", method, path) end
        for code, r in pairs(o.responses or {}) do
          if not (code == "default" or tostring(code):match("^[1-5]%d%d$")) then bad("%s %s: response %s", method, path, code) end
          if not (r["$ref"] or type(r.description) == "string") then bad("%s %s %s: no description", method, path, code) end
        end
        if type(o.security) ~= "table" then bad("%s %s: no security list", method, path) end
        for _, req in ipairs(o.security or {}) do
          for name in pairs(req) do
            if not schemes[name] then bad("%s %s: security scheme %s is not defined", method, path, name) end
          end
        end
      end
    end
  end
  -- every reference anywhere resolves
  for ref in text:gmatch('"%$ref":"([^"]+)"') do
    if not resolve(doc, ref) then bad("reference %s does not resolve", ref) end
  end
  for name, s in pairs(doc.components.schemas) do
    if type(s) ~= "table" or not s.type then bad("schema %s has no type", name) end
  end
  return out
end

-- The locations of the API server of a rendered nginx.conf, in order: { kind =, arg = }. A
-- regex whose tail is optional, `...(?:X)?$`, is two locations here, one with X and one without,
-- so that both of its forms must be documented.
local function locations(text)
  local api = text:match("\n  server {(.-)\n  }\n") -- the first server: the API listener
  local out = {}
  for line in api:gmatch("[^\n]+") do
    local kind, arg = line:match("^%s*location%s+([=~@]?)%s*(%S+)%s*{")
    local head, opt = (arg or ""):match("^(.-)%(%?:(.*)%)%?%$$")
    if kind == "~" and head then
      out[#out + 1] = { kind = kind, arg = head .. "$" }
      out[#out + 1] = { kind = kind, arg = head .. "(?:" .. opt .. ")$" }
    elseif kind then
      out[#out + 1] = { kind = kind, arg = arg }
    end
  end
  return out
end

-- For each sample URI, the location nginx gives it (exact, then the first regex, then the
-- longest prefix), by Python's re (PCRE's named groups written its way).
local function route(locs, uris)
  local regexes = {}
  for i, l in ipairs(locs) do
    if l.kind == "~" then regexes[#regexes + 1] = { i, (l.arg:gsub("%(%?<", "(?P<")) } end
  end
  local script = "import json,re,sys\nr=json.loads(sys.argv[1]);u=json.loads(sys.argv[2])\n"
    .. "print(json.dumps([next((i for i,x in r if re.search(x,p)),0) for p in u]))"
  local out = h.must("python3 -c " .. h.q(script) .. " " .. h.q(core.json_encode(regexes)) .. " "
    .. h.q(core.json_encode(uris)))
  local by_regex = assert(core.json_decode(out))
  local picked = {}
  for n, uri in ipairs(uris) do
    for i, l in ipairs(locs) do if l.kind == "=" and l.arg == uri then picked[n] = i end end
    if not picked[n] and by_regex[n] ~= 0 then picked[n] = by_regex[n] end
    if not picked[n] then
      local best, len = nil, -1
      for i, l in ipairs(locs) do
        if l.kind == "" and uri:sub(1, #l.arg) == l.arg and #l.arg > len then best, len = i, #l.arg end
      end
      picked[n] = best
    end
  end
  return picked
end

local SAMPLE = { key = "k1", id = "7", path = "echo/x" }
local function sample(path) return (path:gsub("{(%w+)}", SAMPLE)) end

-- { { path =, method =, op =, uri = } } of doc, sorted.
local function operations(doc)
  local out = {}
  for path, item in pairs(doc.paths) do
    for method, o in pairs(item) do
      if method ~= "parameters" then out[#out + 1] = { path = path, method = method, op = o, uri = sample(path) } end
    end
  end
  table.sort(out, function(a, b) return a.path .. a.method < b.path .. b.method end)
  return out
end

describe("the gateway's OpenAPI document", function()
  for _, backend in ipairs { "docker", "swarm" } do
    it("is a valid OpenAPI 3.1 description (" .. backend .. ")", function()
      local doc, text = doc_of(backend)
      local p = problems(doc, text)
      assert(#p == 0, table.concat(p, "\n"))
    end)

    it("documents exactly the routes nginx_conf renders (" .. backend .. ")", function()
      local locs = locations(gh.render(config_of(backend), "127.0.0.1:1"))
      local doc = doc_of(backend)
      local ops = operations(doc)
      local uris = {}
      for i, o in ipairs(ops) do uris[i] = o.uri end
      local picked = route(locs, uris)
      local used = {}
      for i, o in ipairs(ops) do
        local l = locs[picked[i]]
        assert(l, o.uri .. " is routed nowhere")
        assert(not (l.kind == "" and l.arg == "/"), ("%s %s falls to the catch-all 404"):format(o.method, o.path))
        assert(not l.arg:find("console", 1, true), o.uri .. " is the console's")
        used[picked[i]] = true
      end
      for i, l in ipairs(locs) do
        local ours = l.kind ~= "@" and not (l.kind == "" and l.arg == "/") and not l.arg:find("console", 1, true)
        if ours then assert(used[i], ("location %s %s is not documented"):format(l.kind, l.arg)) end
      end
    end)
  end

  it("lists the handlers' own lifecycle verbs and ask routes", function()
    local doc = doc_of("docker")
    local verbs = {}
    for v in pairs(require("sandstack.gateway.lifecycle").VERBS) do verbs[#verbs + 1] = v end
    table.sort(verbs)
    local documented = {}
    for path, item in pairs(doc.paths) do
      local v = path:match("^/sessions/{key}/(%a+)$")
      if v then
        assert(item.post, path .. " is not a POST")
        documented[#documented + 1] = v
        assert.equal(v, require("sandstack.gateway.lifecycle").verb("/" .. v))
      end
    end
    table.sort(documented)
    assert.same(verbs, documented)
    local asks = require "sandstack.gateway.asks"
    local kinds = {}
    for path, item in pairs(doc.paths) do
      local rest = path:match("^/sessions/{key}(/egress/asks.*)$")
      if rest then
        local r = asks.route(sample(rest))
        assert(r, path .. " is not an ask route")
        kinds[#kinds + 1] = type(r) == "number" and "answer" or r
        assert(type(r) == "number" and item.post or item.get, path)
      end
    end
    table.sort(kinds)
    assert.same({ "answer", "list", "stream" }, kinds)
  end)
end)

-- nginx runs LuaJIT only; the luajit and asan modes exclude #nginx and load nothing here.
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end

describe("the gateway serves its OpenAPI document #nginx #docker", function()
  local P = gh.PREFIX .. "oa-"
  local node

  setup(function()
    node = gh.start(gh.config { project_prefix = P })
    assert(node:wait_adopted(60), node:error_log())
  end)

  teardown(function()
    if node then node:stop() end
    gh.cleanup(P)
  end)

  it("serves it at GET /openapi.json, as the module renders it", function()
    local st, doc, body, headers = node:api("GET", "/openapi.json")
    assert.equal(200, st, body)
    assert.matches("^application/json", headers["content-type"])
    assert.same(core.json_decode(openapi.json(node.conf)), doc)
  end)

  it("answers each documented request from its handler, 401 exactly where a credential is documented", function()
    local doc = core.json_decode(openapi.json(node.conf))
    for _, o in ipairs(operations(doc)) do
      local st, _, body = node:api(o.method:upper(), o.uri, { timeout = 30 })
      local where = ("%s %s -> %s %s"):format(o.method, o.uri, tostring(st), tostring(body))
      assert.is_nil((body or ""):find("no such route", 1, true), where)
      assert.are_not.equal(405, st, where)
      if #o.op.security > 0 then assert.equal(401, st, where) else assert.equal(200, st, where) end
    end
  end)

  it("answers 405 exactly for the methods it does not document on the routes the gateway owns", function()
    local doc = core.json_decode(openapi.json(node.conf))
    local tried = 0
    for _, path in ipairs { "/sessions", "/sessions/{key}", "/snapshots", "/snapshots/{id}" } do
      local item = doc.paths[path] or {}
      for method in pairs(METHODS) do
        if method ~= "head" and method ~= "options" and method ~= "trace" then
          local st, _, body = node:api(method:upper(), sample(path), { token = gh.TOKENS.alice, timeout = 30 })
          local where = ("%s %s -> %s %s"):format(method, path, tostring(st), tostring(body))
          if item[method] then assert.are_not.equal(405, st, where) else assert.equal(405, st, where) end
          tried = tried + 1
        end
      end
    end
    assert.is_true(tried >= 20, tried)
  end)
end)
