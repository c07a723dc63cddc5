-- The egress policy language (spec 001 "Network access"): validation and matching, as a table
-- of cases. Every refusal is checked for kind, rule index and a reason; every admit for the rule.
local sandstack = require "sandstack"
local policy = sandstack.policy

local function compile_ok(t)
  local p, err = policy.compile(t)
  assert.is_nil(err, err and tostring(err))
  assert.is_truthy(p)
  return p
end

local function refused(t, rule, pattern)
  local p, err = policy.compile(t)
  assert.is_nil(p, "expected a refusal")
  assert.equal("invalid", err.kind)
  assert.equal(rule, err.rule)
  assert.is_string(err.message)
  if pattern then assert.matches(pattern, err.message) end
  return err
end

describe("sandstack.policy.compile", function()
  it("accepts the documented forms and normalizes them", function()
    local p = compile_ok { allow = {
      "API.Example.com",
      { host = "*.Example.org", methods = { "get", "Post" }, paths = { "/v1/*", "/v1/*" } },
      "db.example.com:5432",
      { host = "x.example.net", port = 8443 },
      { host = "y.example.net", methods = { "ANY" } },
      "10.0.0.1",
    } }
    assert.same({
      { host = "api.example.com", wildcard = false, pattern = "api.example.com" },
      { host = "example.org", wildcard = true, pattern = "*.example.org", methods = { "GET", "POST" }, paths = { "/v1/*" } },
      { host = "db.example.com", port = 5432, wildcard = false, pattern = "db.example.com" },
      { host = "x.example.net", port = 8443, wildcard = false, pattern = "x.example.net" },
      { host = "y.example.net", wildcard = false, pattern = "y.example.net", methods = { "ANY" } },
      { host = "10.0.0.1", wildcard = false, pattern = "10.0.0.1" },
    }, p:rules())
    assert.matches("6 rules", tostring(p))
  end)

  it("accepts an empty allow list, which admits nothing", function()
    for _, t in ipairs { {}, { allow = {} } } do
      local p = compile_ok(t)
      assert.same({}, p:rules())
      assert.is_false(p:admits("api.example.com", "GET", "/", 443))
    end
  end)

  it("returns an already compiled policy as it is", function()
    local p = compile_ok { allow = { "a.example" } }
    assert.equal(p, policy.compile(p))
    assert.is_true(policy.is_policy(p))
    assert.is_false(policy.is_policy({ allow = {} }))
  end)

  local bad = {
    -- { rule table, offending rule index or nil, message pattern }
    { { allow = { "ok.example", { host = "a.example", authority = "x" } } }, 2, "authority" },
    { { allow = { "" } }, 1, "empty" },
    { { allow = { "example.com." } }, 1, "dot" },
    { { allow = { "a..example.com" } }, 1, "empty label" },
    { { allow = { ".example.com" } }, 1, "empty label" },
    { { allow = { "bücher.example" } }, 1, "punycode" },
    { { allow = { "under_score.example" } }, 1, "outside" },
    { { allow = { "-lead.example" } }, 1, "'%-'" },
    { { allow = { string.rep("a", 64) .. ".example" } }, 1, "63" },
    { { allow = { string.rep("abcdefgh.", 30) .. "com" } }, 1, "253" },
    { { allow = { "*" } }, 1, "everything" },
    { { allow = { "**.example.com" } }, 1, "every depth" },
    { { allow = { "a.*.example.com" } }, 1, "'%*'" },
    { { allow = { "*example.com" } }, 1, nil },
    { { allow = { "0x7f.1" } }, 1, "numeric" },
    { { allow = { "2130706433" } }, 1, "numeric" },
    { { allow = { "127.1" } }, 1, "numeric" },
    { { allow = { "010.0.0.1" } }, 1, "numeric" },
    { { allow = { "256.0.0.1" } }, 1, "numeric" },
    { { allow = { "*.10.0.0.1" } }, 1, "IP" },
    { { allow = { "[::1]" } }, 1, "IPv6" },
    { { allow = { "::1" } }, 1, "port" },
    { { allow = { "a.example:0" } }, 1, "port" },
    { { allow = { "a.example:65536" } }, 1, "port" },
    { { allow = { "a.example:08080" } }, 1, "port" },
    { { allow = { "a.example:" } }, 1, "port" },
    { { allow = { "a.example:http" } }, 1, "port" },
    { { allow = { { host = "a.example:80", port = 80 } } }, 1, "either" },
    { { allow = { { host = "a.example", port = 0 } } }, 1, "port" },
    { { allow = { { host = "a.example", port = 80.5 } } }, 1, "port" },
    { { allow = { { host = "a.example", port = "80" } } }, 1, "port" },
    { { allow = { { port = 80 } } }, 1, "needs 'host'" },
    { { allow = { {} } }, 1, nil },
    { { allow = { 42 } }, 1, "host string" },
    { { allow = { { host = "a.example", method = { "GET" } } } }, 1, "unknown key" },
    { { allow = { { host = "a.example", methods = {} } } }, 1, "non%-empty" },
    { { allow = { { host = "a.example", methods = "GET" } } }, 1, "list" },
    { { allow = { { host = "a.example", methods = { "FETCH" } } } }, 1, "unknown method" },
    { { allow = { { host = "a.example", methods = { "ANY", "GET" } } } }, 1, "ANY" },
    { { allow = { { host = "a.example", paths = { "/v1/*" } } } }, 1, "needs 'methods'" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = {} } } }, 1, "non%-empty" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "v1" } } } }, 1, "start with" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/v1*" } } } }, 1, "last segment" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/v1/*/x" } } } }, 1, "last segment" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/v1/**" } } } }, 1, "last segment" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/a/../b" } } } }, 1, "segment" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/a//b" } } } }, 1, "segment" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/a%2fb" } } } }, 1, "RFC 3986" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/a?x=1" } } } }, 1, "RFC 3986" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/a;x" } } } }, 1, "RFC 3986" },
    { { allow = { { host = "a.example", methods = { "GET" }, paths = { "/" .. string.rep("a", 1100) } } } }, 1, "1024" },
    { { allow = { "ok.example", { host = "a.example", f = function() end } } }, 2, "cannot be read" },
    { { allow = { "ok.example", "a\0.example" } }, 2, "cannot be read" },
    { { allow = { "a.example", [3] = "b.example" } }, nil, "list" },
    { { allow = { "a.example", x = "b.example" } }, nil, "list" },
    { { allow = "a.example" }, nil, "list" },
    { { deny = { "a.example" } }, nil, "unknown key 'deny' in the policy" },
    -- ambiguity beside a wildcard (spec 001: sbx cannot keep such a rule next to it)
    { { allow = { "*.example.com", { host = "example.com", methods = { "GET" } } } }, 2, "ambiguous" },
    { { allow = { "*.example.com", { host = "api.example.com", methods = { "GET" }, paths = { "/v1/*" } } } }, 2, "ambiguous" },
    { { allow = { { host = "api.example.com", methods = { "POST" } }, "*.example.com" } }, 2, "ambiguous" },
    { { allow = { "*.example.com", { host = "*.a.example.com", methods = { "GET" } } } }, 2, "ambiguous" },
    { { allow = { "*.example.com", { host = "*.example.com", methods = { "GET" } } } }, 2, "ambiguous" },
    { { allow = { { host = "*.example.com", port = 443, methods = { "GET" } }, { host = "*.example.com", methods = { "POST" } } } }, 2, "ambiguous" },
    { { allow = { { host = "*.example.com", methods = { "GET" } }, { host = "api.example.com", methods = { "POST" } } } }, 2, "ambiguous" },
    { { allow = { "*.example.com:443", { host = "x.example.com", port = 443, methods = { "GET" } } } }, 2, "ambiguous" },
  }

  it("refuses every unreadable or ambiguous rule, naming it", function()
    for i, case in ipairs(bad) do
      local ok, e = pcall(refused, case[1], case[2], case[3])
      if not ok then error(("case %d: %s"):format(i, tostring(e)), 0) end
    end
  end)

  it("names the rule a conflict is with", function()
    local err = refused({ allow = { "x.test", "*.example.com", { host = "example.com", methods = { "GET" } } } }, 3)
    assert.equal(2, err.conflicts_with)
  end)

  it("keeps rules that only look close to a wildcard", function()
    compile_ok { allow = { "*.example.com", "example.com" } } -- bare apex beside the wildcard: both plain
    compile_ok { allow = { "*.example.com", "api.example.com" } }
    compile_ok { allow = { "*.example.com", { host = "example.org", methods = { "GET" } } } }
    compile_ok { allow = { "*.example.com:443", { host = "x.example.com", port = 8080, methods = { "GET" } } } }
    compile_ok { allow = { { host = "*.example.com", methods = { "GET" } }, "notexample.com" } }
    -- a plain rule inside a narrowed wildcard: the plain rule already admits everything there
    compile_ok { allow = { "api.example.com", { host = "*.example.com", methods = { "GET" }, paths = { "/v1/*" } } } }
    compile_ok { allow = { { host = "*.example.com", methods = { "GET" } }, "example.com" } }
    compile_ok { allow = { { host = "*.example.com", methods = { "GET" } }, "*.a.example.com" } }
    compile_ok { allow = { { host = "*.example.com", methods = { "GET" } }, { host = "*.example.com", methods = { "POST" }, paths = { "/x" } } } }
    compile_ok { allow = { { host = "a.example", methods = { "GET" } }, { host = "a.example", methods = { "POST" } } } }
  end)

  it("raises for a non-table argument (a programming error)", function()
    assert.has_error(function() policy.compile("a.example") end)
    assert.has_error(function() policy.compile(nil) end)
  end)
end)

describe("policy:admits", function()
  local p = compile_ok { allow = {
    "api.example.com",                                                             -- 1
    { host = "*.example.org", methods = { "GET" }, paths = { "/v1/*", "/health" } }, -- 2
    "db.example.com:5432",                                                          -- 3
    { host = "up.example.net", methods = { "POST", "GET" }, paths = { "/v1/messages" } }, -- 4
    { host = "any.example.net", methods = { "ANY" } },                              -- 5
    { host = "root.example.net", methods = { "GET" }, paths = { "/*" } },           -- 6
    "*.wild.test",                                                                  -- 7
    { host = "up.example.net", methods = { "DELETE" } },                            -- 8
    "10.1.2.3:80",                                                                  -- 9
  } }

  local cases = {
    -- host, method, path, port, admitted rule or false, refusal reason
    { "api.example.com", "GET", "/", 443, 1 },
    { "API.EXAMPLE.COM", "delete", "/anything/at/all", 8080, 1 },
    { "api.example.com", nil, nil, nil, 1 },            -- bare host: every port, a raw connection too
    { "api.example.com.", "GET", "/", 443, false, "bad_host" }, -- trailing dot: not the same spelling
    { "xapi.example.com", "GET", "/", 443, false, "host" },
    { "sub.api.example.com", "GET", "/", 443, false, "host" },
    { "api.example.co", "GET", "/", 443, false, "host" },
    { "a.example.org", "GET", "/v1", 443, 2 },           -- /v1/* admits /v1 itself
    { "a.example.org", "GET", "/v1/", 443, 2 },
    { "a.b.c.example.org", "get", "/v1/models/x?y=1", 443, 2 }, -- any depth; query not matched
    { "example.org", "GET", "/v1", 443, false, "host" },  -- never the apex
    { "EXAMPLE.ORG", "GET", "/v1", 443, false, "host" },
    { "aexample.org", "GET", "/v1", 443, false, "host" },
    { "a.example.org", "GET", "/v10", 443, false, "path" },
    { "a.example.org", "GET", "/v", 443, false, "path" },
    { "a.example.org", "GET", "/health", 443, 2 },
    { "a.example.org", "GET", "/health/", 443, false, "path" }, -- exact path is exact
    { "a.example.org", "GET", "/HEALTH", 443, false, "path" },  -- paths are case-sensitive
    { "a.example.org", "POST", "/v1/x", 443, false, "method" },
    { "a.example.org", "GET", nil, 443, false, "path" },        -- a path rule needs a path
    { "a.example.org", nil, nil, 443, false, "method" },        -- a raw connection is no GET
    { "a.example.org", "GET", "/v1/../admin", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/./x", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/..", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1//x", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/%2e%2e/admin", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1%2fx", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/%252e", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/x%", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/x%4", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1\\..\\admin", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/..;/admin", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/a b", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/#frag", 443, false, "bad_path" },
    { "a.example.org", "GET", "v1/x", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/x\0/../y", 443, false, "bad_path" },
    { "a.example.org", "GET", "/v1/%41", 443, 2 },              -- other escapes are matched as written
    { "a.example.org", "G ET", "/v1", 443, false, "bad_method" },
    { "a.example.org", "", "/v1", 443, false, "bad_method" },
    { "db.example.com", nil, nil, 5432, 3 },
    { "db.example.com", "GET", "/", 5432, 3 },
    { "db.example.com", nil, nil, 5433, false, "host" },
    { "db.example.com", nil, nil, nil, false, "host" },         -- unknown port: port rules do not apply
    { "db.example.com", nil, nil, 70000, false, "host" },
    { "up.example.net", "POST", "/v1/messages", 443, 4 },
    { "up.example.net", "POST", "/v1/messages?beta=true", 443, 4 },
    { "up.example.net", "POST", "/v1/messages/", 443, false, "path" },
    { "up.example.net", "POST", "/v1/complete", 443, false, "path" },
    { "up.example.net", "PUT", "/v1/messages", 443, false, "method" },
    { "up.example.net", "DELETE", "/v1/messages", 443, 8 },     -- a later rule for the same host
    { "any.example.net", "PROPFIND", "/x", 443, 5 },            -- ANY: every method
    { "any.example.net", "get", "/", 443, 5 },
    { "any.example.net", nil, nil, 443, false, "method" },
    { "root.example.net", "GET", "/", 443, 6 },                 -- /* admits everything
    { "root.example.net", "GET", "/a/b/c", 443, 6 },
    { "root.example.net", "HEAD", "/", 443, false, "method" },
    { "x.wild.test", "GET", "/", 1, 7 },
    { "wild.test", "GET", "/", 1, false, "host" },
    { "x.wild.test.evil", "GET", "/", 1, false, "host" },
    { "x-wild.test", "GET", "/", 1, false, "host" },
    { "10.1.2.3", "GET", "/", 80, 9 },
    { "10.1.2.3", "GET", "/", 81, false, "host" },
    { "010.1.2.3", "GET", "/", 80, false, "bad_host" },
    { "167903747", "GET", "/", 80, false, "bad_host" },         -- 10.1.2.3 as one number
    { "api.example.com\0.evil", "GET", "/", 443, false, "bad_host" },
    { "api.example.com:443", "GET", "/", 443, false, "bad_host" },
    { "*.example.org", "GET", "/v1", 443, false, "bad_host" },
    { "", "GET", "/", 443, false, "bad_host" },
    { "xn--bcher-kva.example", "GET", "/", 443, false, "host" },
    { "bücher.example", "GET", "/", 443, false, "bad_host" },
  }

  it("matches the table of hosts, methods, paths and ports", function()
    for i, c in ipairs(cases) do
      local host, method, path, port, want, reason = c[1], c[2], c[3], c[4], c[5], c[6]
      local ok, rule = p:admits(host, method, path, port)
      local ctx = ("case %d: %q %s %s %s"):format(i, host, tostring(method), tostring(path), tostring(port))
      local ex = p:explain(host, method, path, port)
      if want then
        assert.is_true(ok, ctx)
        assert.equal(want, rule, ctx)
        assert.same({ admitted = true, rule = want }, ex, ctx)
      else
        assert.is_false(ok, ctx)
        assert.is_nil(rule, ctx)
        assert.is_false(ex.admitted, ctx)
        assert.equal(reason, ex.reason, ctx)
      end
    end
  end)

  it("names the rule a refusal ran into", function()
    assert.same({ admitted = false, rule = 2, reason = "path" }, p:explain("a.example.org", "GET", "/v2", 443))
    assert.same({ admitted = false, rule = 4, reason = "method" }, p:explain("up.example.net", "PUT", "/v1/messages", 443))
    assert.same({ admitted = false, reason = "host" }, p:explain("nowhere.test", "GET", "/", 443))
  end)

  it("raises for arguments of the wrong type", function()
    assert.has_error(function() p:admits(nil, "GET", "/", 1) end)
    assert.has_error(function() p:admits("a.test", {}, "/", 1) end)
    assert.has_error(function() p.admits({}, "a.test") end)
  end)

  it("is closed idempotently and then refuses use", function()
    local q = compile_ok { allow = { "a.test" } }
    q:close()
    q:close()
    assert.has_error(function() q:admits("a.test") end)
    assert.matches("closed", tostring(q))
  end)
end)

describe("policy:render and policy.load", function()
  it("renders canonical JSON that loads back to the same policy", function()
    local p = compile_ok { allow = {
      "API.example.com",
      { host = "*.example.org", methods = { "post", "GET" }, paths = { "/v1/*" } },
      "db.example.com:5432",
    } }
    local json = p:render()
    assert.same({
      version = 1,
      allow = {
        { host = "api.example.com" },
        { host = "*.example.org", methods = { "GET", "POST" }, paths = { "/v1/*" } },
        { host = "db.example.com", port = 5432 },
      },
    }, sandstack.core.json_decode(json))
    local q = assert(policy.load(json))
    assert.equal(json, q:render())
    assert.same(p:rules(), q:rules())
    assert.same({ q:admits("x.example.org", "GET", "/v1/m", 1) }, { true, 2 })
  end)

  it("renders an empty policy as an empty list", function()
    local p = compile_ok { allow = {} }
    assert.equal('{"version":1,"allow":[]}', p:render())
    assert.truthy(policy.load(p:render()))
  end)

  it("carries inspect = false through compile, render and load; true is the default and renders as before", function()
    local rules = { { host = "api.example.com", methods = { "GET" } } }
    local on = compile_ok { allow = rules }
    assert.equal('{"version":1,"allow":[{"host":"api.example.com","methods":["GET"]}]}', on:render()) -- control
    assert.equal(on:render(), compile_ok({ allow = rules, inspect = true }):render())
    local off = compile_ok { allow = rules, inspect = false }
    assert.equal('{"version":1,"allow":[{"host":"api.example.com","methods":["GET"]}],"inspect":false}', off:render())
    assert.equal(off:render(), assert(policy.load(off:render())):render())
    assert.same({ true, 1 }, { off:admits("api.example.com", "GET", "/", 443) }) -- matching is unchanged
    for _, bad in ipairs { "no", 0, {} } do
      local p, err = policy.compile { allow = rules, inspect = bad }
      assert.is_nil(p)
      assert.equal("invalid", err.kind)
      assert.matches("'inspect' must be true or false", err.message, 1, true)
    end
    local p, err = policy.load('{"allow":[],"inspect":"false"}')
    assert.is_nil(p)
    assert.matches("'inspect' must be true or false", err.message, 1, true)
  end)

  it("carries allow_private through compile, render and load, as written; absent, the render is as before", function()
    local rules = { "registry.internal:5000" }
    assert.equal('{"version":1,"allow":[{"host":"registry.internal","port":5000}]}',
      compile_ok({ allow = rules }):render()) -- control
    assert.equal(compile_ok({ allow = rules }):render(), compile_ok({ allow = rules, allow_private = {} }):render())
    local p = compile_ok { allow = rules, allow_private = { "10.0.0.7", "127.0.0.1:9080", "[fd00::7]:5000" } }
    assert.equal('{"version":1,"allow":[{"host":"registry.internal","port":5000}],'
      .. '"allow_private":["10.0.0.7","127.0.0.1:9080","[fd00::7]:5000"]}', p:render())
    assert.equal(p:render(), assert(policy.load(p:render())):render())
    assert.same({ false }, { p:admits("10.0.0.7", nil, nil, 5000) }) -- it admits nothing by itself
    local cases = {
      { "10.0.0.0/8", "allow_private 1 ('10.0.0.0/8'): name one address: a range (CIDR) is never opened" },
      { "8.8.8.8", "allow_private 1 ('8.8.8.8'): not in a refused range" },
      { "0.0.0.0", "allow_private 1 ('0.0.0.0'): not a destination" },
      { "registry.internal", "allow_private 1 ('registry.internal'): an address in a refused range" },
      { 7, "allow_private 1: must be a string" },
    }
    for _, c in ipairs(cases) do
      local q, err = policy.compile { allow = rules, allow_private = { c[1] } }
      assert.is_nil(q, tostring(c[1]))
      assert.equal("invalid", err.kind)
      assert.equal(1, err.allow_private)
      assert.matches(c[2], err.message, 1, true)
    end
    local q, err = policy.compile { allow = rules, allow_private = "10.0.0.7" }
    assert.is_nil(q)
    assert.matches("'allow_private' must be a list of addresses", err.message, 1, true)
  end)

  it("refuses JSON that is not a policy", function()
    local inputs = {
      "", "{", "[]", "null", '{"allow":{}} x', '{"allow":["a.test"],"deny":[]}',
      '{"version":2,"allow":[]}', '{"allow":["a.test\\u0000.evil"]}', '{"allow":[{"host":"a.test","authority":"x"}]}',
      '{"allow":' .. string.rep("[", 2000) .. string.rep("]", 2000) .. "}",
      '{"allow":["' .. string.rep("a", 1048576) .. '"]}',
    }
    for i, s in ipairs(inputs) do
      local q, err = policy.load(s)
      assert.is_nil(q, "input " .. i)
      assert.equal("invalid", err.kind, "input " .. i)
    end
    local _, err = policy.load('{"allow":["ok.test","bad..test"]}')
    assert.equal(2, err.rule)
  end)
end)

describe("a rule's reason", function()
  local text = "read-only GitHub: ask the operator before pushing (runbook #12) ~ 100%"
  it("is returned by explain for the refusal its rule decides, as given, and not for others", function()
    local p = assert(policy.compile { allow = {
      { host = "api.github.test", methods = { "GET" }, reason = text },
      { host = "db.test", port = 5432, raw = true, reason = "the database, raw" },
      "plain.test",
    } })
    assert.same({ admitted = false, rule = 1, reason = "method", rule_reason = text },
      p:explain("api.github.test", "POST", "/repos", 443))
    assert.same({ admitted = true, rule = 1 }, p:explain("api.github.test", "GET", "/repos", 443))
    assert.same({ admitted = false, reason = "host" }, p:explain("other.test", "GET", "/", 443))
    assert.same({ admitted = false, reason = "host" }, p:explain("db.test", nil, nil, 5433))
    assert.equal(text, p:rules()[1].reason)
    assert.is_nil(p:rules()[3].reason)
  end)

  it("renders and loads back unchanged", function()
    local p = assert(policy.compile { allow = { { host = "a.test", methods = { "GET" }, reason = text }, "b.test" } })
    local json = p:render()
    assert.truthy(json:find('"reason":"' .. text .. '"', 1, true), json)
    local q = assert(policy.load(json))
    assert.equal(json, q:render())
    assert.equal(text, q:explain("a.test", "PUT", "/", 443).rule_reason)
  end)

  it("is refused when empty, too long, not a string, or holding control or non-ASCII bytes", function()
    local bad = { "", string.rep("x", 201), "two\nlines", "tab\there", "caf\195\169", "del\127", 42, true, {} }
    for i, r in ipairs(bad) do
      local q, err = policy.compile { allow = { "ok.test", { host = "a.test", reason = r } } }
      assert.is_nil(q, "input " .. i)
      assert.equal("invalid", err.kind, "input " .. i)
      assert.equal(2, err.rule, "input " .. i)
      assert.truthy(err.message:find("reason", 1, true), err.message)
    end
    assert.is_nil(policy.compile { allow = { { host = "a.test", reason = "nul\0byte" } } }) -- refused by the binding
    assert(policy.compile { allow = { { host = "a.test", reason = string.rep("x", 200) } } })
    assert(policy.compile { allow = { { host = "a.test", reason = " !~" } } })
    local q, err = policy.load('{"allow":[{"host":"a.test","reason":"bell\\u0007"}]}')
    assert.is_nil(q)
    assert.equal(1, err.rule)
  end)
end)

describe("docs/policy.md", function()
  it("shows what the code does", function()
    local p = assert(policy.compile { allow = {
      "api.example.com",
      { host = "*.example.com", methods = { "GET" }, paths = { "/v1/*" } },
      "db.example.com:5432",
    } })
    assert.same({ true, 1 }, { p:admits("api.example.com", "POST", "/v1/messages", 443) })
    assert.same({ true, 2 }, { p:admits("x.y.example.com", "get", "/v1", 443) })
    assert.same({ false }, { p:admits("example.com", "GET", "/v1", 443) })
    assert.same({ true, 3 }, { p:admits("db.example.com", nil, nil, 5432) })
    assert.same({ admitted = false, rule = 2, reason = "method" }, p:explain("a.example.com", "POST", "/v1", 443))
    assert.equal('{"version":1,"allow":[{"host":"api.example.com"},{"host":"*.example.com","methods":["GET"],'
      .. '"paths":["/v1/*"]},{"host":"db.example.com","port":5432}]}', p:render())
  end)
end)
