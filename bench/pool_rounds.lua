-- Rounds of acquires from one warm pool by several processes at once, shared by
-- bench/pool_bench.lua and bench/control_bench.lua: child processes started once, every round
-- begun at the same moment by a barrier file, each acquire's steps (pool.last_acquire) printed
-- as one line; and the pool's stacks recycled between rounds.
local sandstack = require "sandstack"
local core = require "sandstack.core"
local batch = require "sandstack.stack.batch"
local inventory = require "sandstack.docker.inventory"

local M = {}

function M.pct(xs, p)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[math.max(1, math.ceil(p / 100 * #s))]
end
function M.ms(x) return x * 1e3 end
function M.loadavg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("*l") or "?"
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)") or s
end
local function read(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- A Lua value (no functions) as Lua source.
function M.source(v)
  if type(v) == "table" then
    local parts = {}
    for k, x in pairs(v) do parts[#parts + 1] = "[" .. M.source(k) .. "]=" .. M.source(x) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return type(v) == "string" and ("%q"):format(v) or tostring(v)
end

-- o = { name =, rounds =, procs =, stack = the pool's stack options, between = function(round)
-- run after each round, acquire = the acquire's overrides (a table), prelude = Lua source the
-- children run first }. Each child closes (never destroys) its handle and prints "R <round> <total>
-- <list> <claim> <plan> <handle> <record> <tries> <kind> <egress> <find> <after> <mark> <engine>" per
-- round (after: a claim answered early, completed by that close; mark: its file marked claimed
-- first; engine: the pool's engine client, made by a process's first acquire). Returns
-- the lines of all rounds.
function M.rounds(o)
  local dir = io.popen("mktemp -d /tmp/ssbench-pool.XXXXXX"):read("*l")
  local f = assert(io.open(dir .. "/opts.lua", "w"))
  f:write("return " .. M.source(o.stack))
  f:close()
  f = assert(io.open(dir .. "/child.lua", "w"))
  f:write(("package.path = %q; package.cpath = %q\n"):format(package.path, package.cpath), o.prelude or "", "\n", ([[
    local sandstack = require "sandstack"
    local core = require "sandstack.core"
    local pool = assert(sandstack.docker.pool { name = %q, size = 0, max = 64, stack = dofile(%q) })
    local dir, me, over = %q, arg[1], %s
    for round = 1, %d do
      while not io.open(dir .. "/go" .. round) do core.sleep(0.002) end
      local t0 = core.engine_clock()
      local s = assert(pool:acquire("b" .. me .. "-" .. round, over))
      local total = core.engine_clock() - t0
      local t = pool.last_acquire
      s:close() -- a claim answered before the engine's rename completes here (t.after)
      print(("R %%d %%.6f %%.6f %%.6f %%.6f %%.6f %%.6f %%d %%s %%.6f %%.6f %%.6f %%.6f %%.6f"):format(round,
        total, t.list or 0, t.claim or 0, t.plan or 0, t.handle or 0, t.record or 0, t.tries or 0,
        t.claim and "warm" or "cold", t.egress or 0, t.find or 0, t.after or 0, t.mark or 0, t.engine or 0))
      io.stdout:flush()
    end
    print("DONE")
  ]]):format(o.name, dir .. "/opts.lua", dir, M.source(o.acquire), o.rounds))
  f:close()
  local cmds = {}
  for i = 1, o.procs do cmds[i] = ("(lua5.4 %s/child.lua %d > %s/out%d 2>&1 &)"):format(dir, i, dir, i) end
  os.execute(table.concat(cmds, "; "))
  core.sleep(1.0) -- every child loads and waits at the barrier
  local lines = {}
  for round = 1, o.rounds do
    io.open(dir .. "/go" .. round, "w"):close()
    for i = 1, o.procs do
      for _ = 1, 3000 do
        local s = read(dir .. "/out" .. i)
        local line = s:match("\n?(R " .. round .. " [^\n]*)\n")
        if line then lines[#lines + 1] = line; break end
        if s:find("lua5.4:", 1, true) then error("child " .. i .. ": " .. s) end
        core.sleep(0.01)
      end
    end
    if o.between then o.between(round) end
  end
  os.execute("rm -rf " .. dir)
  assert(#lines == o.procs * o.rounds, "a child did not finish")
  return lines
end

-- Every stack the pool has claimed goes back to idle: the claim renamed back to the ready mark,
-- the record removed and its file in this host's store made idle again (what acquire measures is the same on a recycled stack; no new stacks
-- needed for every round).
function M.recycle(name)
  local eng = assert(sandstack.engine {})
  local cs = assert(eng:call("GET", "/containers/json", nil, { query = { all = "1",
    filters = { label = { "io.sandstack.pool=" .. name, "io.sandstack.role=ready" } } } }))
  local reqs, vols = {}, {}
  for _, c in ipairs(cs) do
    local p = c.Labels["io.sandstack.project"]
    if inventory.mark_role(c) == "claim" then
      reqs[#reqs + 1] = { "POST", "/containers/" .. p .. "-claim/rename", nil, { query = { name = p .. "-ready" } } }
      vols[#vols + 1] = p .. "-claim"
      require("sandstack.docker.pool_store").unclaim(p)
    end
  end
  assert(not batch.first_error(batch.run(eng, reqs, 30)))
  assert(batch.remove(eng, { volumes = vols }))
  eng:close()
end

-- Removes every stack of the pool, the ones sessions hold included.
function M.drain(name)
  for _, s in ipairs(assert(sandstack.docker.list { pool = name })) do assert(sandstack.docker.down(s.project)) end
end

local FIELDS = { total = 3, list = 4, claim = 5, plan = 6, handle = 7, record = 8, tries = 9, kind = 10, egress = 11,
  find = 12, after = 13, mark = 14, engine = 15, round = 2 }
-- The rounds' lines as records { total =, list =, ... }, the warm ones only when warm_only.
function M.parse(lines, warm_only)
  local out = {}
  for _, l in ipairs(lines) do
    local v = {}
    for w in l:gmatch("%S+") do v[#v + 1] = w end
    local r = {}
    for k, i in pairs(FIELDS) do r[k] = tonumber(v[i]) or v[i] end
    if not warm_only or r.kind == "warm" then out[#out + 1] = r end
  end
  return out
end
function M.column(rs, f)
  local xs = {}
  for i, r in ipairs(rs) do xs[i] = f(r) end
  return xs
end

return M
