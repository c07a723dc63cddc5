-- The candidates for a warm-pool claim that a swarm's manager arbitrates, measured on a
-- three-node swarm of nested Docker engines (spec/support/swarm-cluster.sh). Two claimers race
-- for one pooled session in every round: both requests go out in one batch, so they reach the
-- manager together, and exactly one must win.
--   label    a labelled service update at the version both read (Swarm's optimistic
--            concurrency: the update at a stale version is refused);
--   create   a create of a service whose name is derived from the pooled session ("<slot>-claim"):
--            the manager refuses the second name;
--   rename   a service update that changes Spec.Name (one try: what the manager answers).
-- The baseline is one service inspect on the manager, measured in the same rounds; the ratios
-- are the result, the absolute times depend on the machine.
--   lua5.4 bench/swarm_claim_bench.lua [ROUNDS]    (root, from the repository root; default 20)
package.path = "./lua/?.lua;./lua/?/init.lua;./bench/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local sandstack = require "sandstack"
local core = sandstack.core

local ROUNDS = tonumber(arg[1]) or 20
local PREFIX = "sstest-swclaim-" .. core.random_hex(2):lower() .. "-"
local CLUSTER = "bash spec/support/swarm-cluster.sh"
local IMAGE = "sandstack-test/agent:local"

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  local ok = p:close()
  return out, ok
end

local function pct(xs, p)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  if #t == 0 then return 0 end
  return t[math.max(1, math.ceil(#t * p))]
end

local up, ok = sh(CLUSTER .. " up " .. PREFIX .. " 2>/dev/null")
if not ok then
  sh(CLUSTER .. " down " .. PREFIX .. " >/dev/null 2>&1")
  error("swarm-cluster.sh up failed")
end
local manager = "unix://" .. up:match("MANAGER_SOCK=([^\n]+)")
local mgr = assert(sandstack.engine { host = manager })

-- A pooled session's service: labelled free, no replica (nothing runs: the claim alone is measured).
local function slot_body(name, labels)
  local l = { ["io.sandstack.pool"] = "bench" }
  for k, v in pairs(labels or {}) do l[k] = v end
  return { Name = name, Labels = l, TaskTemplate = { ContainerSpec = { Image = IMAGE, Command = { "agent" } } },
    Mode = { Replicated = { Replicas = 0 } } }
end

local results = require("results")
local run = results.begin("swarm-claim", { title = "# Results: a warm-pool claim on a swarm",
  intro = "bench/swarm_claim_bench.lua: two claimers race for one pooled session per round, on a "
    .. "three-node swarm of nested engines; the baseline is one service inspect on the manager.",
  argv = arg, markdown = true })

local t = { base = {}, label = {}, create = {} }
local wins = { label = 0, create = 0 }
local refusals = {}
local function note(kind, r)
  local msg = type(r.body) == "table" and r.body.message or (r.err and r.err.message) or ""
  refusals[kind] = refusals[kind] or ("%s %s"):format(tostring(r.status), tostring(msg):sub(1, 80))
end

local rename_answer
local ok_run, err_run = pcall(function()
  for i = 1, ROUNDS do
    local name = "bench-slot-" .. i
    local s = assert(mgr:call("POST", "/services/create", slot_body(name)))
    local t0 = core.engine_clock()
    local cur = assert(mgr:call("GET", "/services/" .. s.ID))
    t.base[#t.base + 1] = core.engine_clock() - t0
    -- label: both update at the version read
    local reqs = {}
    for c = 1, 2 do
      local spec = cur.Spec
      spec.Labels["io.sandstack.claimed"] = "claimer-" .. c
      reqs[c] = { "POST", "/services/" .. s.ID .. "/update", core.json_encode(spec),
        { query = { version = tostring(cur.Version.Index) } } }
    end
    t0 = core.engine_clock()
    local r = mgr:perform(reqs)
    t.label[#t.label + 1] = core.engine_clock() - t0
    local won = 0
    for _, x in ipairs(r) do if x.ok then won = won + 1 else note("label", x) end end
    if won == 1 then wins.label = wins.label + 1 end
    -- create: both create the derived name
    reqs = {}
    for c = 1, 2 do
      reqs[c] = { "POST", "/services/create", core.json_encode(slot_body(name .. "-claim",
        { ["io.sandstack.claimed"] = "claimer-" .. c })) }
    end
    t0 = core.engine_clock()
    r = mgr:perform(reqs)
    t.create[#t.create + 1] = core.engine_clock() - t0
    won = 0
    for _, x in ipairs(r) do if x.ok then won = won + 1 else note("create", x) end end
    if won == 1 then wins.create = wins.create + 1 end
    if i == 1 then -- rename: what the manager says to a changed Spec.Name
      cur = assert(mgr:call("GET", "/services/" .. s.ID))
      cur.Spec.Name = name .. "-renamed"
      local x = mgr:perform({ { "POST", "/services/" .. s.ID .. "/update", core.json_encode(cur.Spec),
        { query = { version = tostring(cur.Version.Index) } } } })[1]
      rename_answer = x.ok and "accepted" or ("refused: %s %s"):format(tostring(x.status),
        tostring(type(x.body) == "table" and x.body.message or (x.err and x.err.message)):sub(1, 80))
    end
    mgr:call("DELETE", "/services/" .. name, nil, { ok = { [404] = true } })
    mgr:call("DELETE", "/services/" .. name .. "-claim", nil, { ok = { [404] = true } })
  end
end)
mgr:close()
sh(CLUSTER .. " down " .. PREFIX .. " >/dev/null 2>&1")
if not ok_run then error(err_run, 0) end

local b50 = pct(t.base, 0.5)
print("| candidate | one winner per round | p50 ms | p99 ms | p50 / inspect |")
print("|---|---|---|---|---|")
print(("| inspect (baseline) | - | %.1f | %.1f | 1.00 |"):format(1000 * b50, 1000 * pct(t.base, 0.99)))
for _, k in ipairs { "label", "create" } do
  print(("| %s | %d of %d | %.1f | %.1f | %.2f |"):format(k == "label" and "label update at a version" or
    "create by a derived name", wins[k], ROUNDS, 1000 * pct(t[k], 0.5), 1000 * pct(t[k], 0.99),
    pct(t[k], 0.5) / b50))
end
print()
print("The loser's answer: label update `" .. tostring(refusals.label) .. "`; create `" .. tostring(refusals.create)
  .. "`. A rename: " .. tostring(rename_answer) .. ".")
run:finish {}
