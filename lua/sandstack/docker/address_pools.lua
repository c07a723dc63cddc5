-- How many more stacks the engine's address pools hold: the pools a local engine was started
-- with (its --default-address-pool flags, else its daemon.json's default-address-pools, else the
-- engine's built-in ones), or a user's subnet_pool, against the subnets of the networks the
-- engine has now. For `sandstack check` (a listing of networks, so never part of a start: a
-- start that finds no free subnet is refused by the engine, typed address_pool_exhausted).
local M = {}

-- Docker's built-in pools when none is configured: 172.17-31.0.0/16 as /16s, 192.168.0.0/16 as
-- /20s (31 networks; docs/results/docker.md measured "about 31").
M.BUILTIN = {}
for i = 17, 31 do M.BUILTIN[#M.BUILTIN + 1] = { base = ("172.%d.0.0/16"):format(i), size = 16 } end
M.BUILTIN[#M.BUILTIN + 1] = { base = "192.168.0.0/16", size = 20 }

-- "10.1.2.0/24" -> first address as a number, prefix length; nil for anything else (IPv6 too).
function M.cidr(s)
  local a, b, c, d, p = tostring(s):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)/(%d+)$")
  if not a then return nil end
  a, b, c, d, p = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(p)
  if a > 255 or b > 255 or c > 255 or d > 255 or p > 32 then return nil end
  local size = 2 ^ (32 - p)
  local addr = ((a * 256 + b) * 256 + c) * 256 + d
  return addr - addr % size, p
end

local function inside(sub, pool)
  local s, sp = M.cidr(sub)
  local b, bp = M.cidr(pool)
  if not s or not b or sp < bp then return false end
  return s >= b and s < b + 2 ^ (32 - bp)
end

-- "base=10.96.0.0/11,size=24" -> { base =, size = }, or nil.
local function flag_pool(v)
  local base, size = v:match("base=([^,]+),size=(%d+)")
  if not base then
    size, base = v:match("size=(%d+),base=([^,]+)")
  end
  return base and { base = base, size = tonumber(size) } or nil
end

-- The engine's pools from its command line (core.engine_process's args), else its daemon.json
-- (read_file(path): the file's text as the engine sees it, or nil, err, reason "not_found" for
-- none): pools, and where they came from; nil and why when the file cannot be read.
function M.engine_pools(args, read_file)
  local pools, config = {}, "/etc/docker/daemon.json"
  for i, a in ipairs(args or {}) do
    local v = a:match("^%-%-default%-address%-pool=(.*)$") or (a == "--default-address-pool" and args[i + 1])
    if v then pools[#pools + 1] = flag_pool(v) end
    config = a:match("^%-%-config%-file=(.*)$") or (a == "--config-file" and args[i + 1]) or config
  end
  if #pools > 0 then return pools, "the engine's --default-address-pool flags" end
  local text, rerr = read_file(config)
  -- a file that is there but cannot be read says nothing of the pools: never the built-in ones
  if not text and rerr and rerr.reason ~= "not_found" then return nil, tostring(rerr.message) end
  local ok, doc = pcall(require("sandstack.core").json_decode, text or "null")
  if ok and type(doc) == "table" and type(doc["default-address-pools"]) == "table" then
    for _, p in ipairs(doc["default-address-pools"]) do
      if type(p) == "table" and M.cidr(p.base) then pools[#pools + 1] = { base = p.base, size = tonumber(p.size) } end
    end
    if #pools > 0 then return pools, "default-address-pools in " .. config end
  end
  return M.BUILTIN, "the engine's built-in pools"
end

-- The networks each pool can still give: subnets (the engine's networks' subnets) in a pool
-- are taken. -> total, free (in networks of the pools' sizes).
function M.capacity(pools, subnets)
  local total, used = 0, 0
  for _, p in ipairs(pools) do
    local _, bp = M.cidr(p.base)
    if bp and p.size and p.size >= bp then
      total = total + 2 ^ (p.size - bp)
      for _, s in ipairs(subnets) do
        local _, sp = M.cidr(s)
        -- a subnet larger than the pool's size takes as many of its networks as it covers
        if sp and inside(s, p.base) then used = used + 2 ^ (math.max(0, p.size - sp)) end
      end
    end
  end
  return math.floor(total), math.floor(math.max(0, total - used))
end

-- The pool judged for n more stacks (networks each): the same record as host_limits.judge's.
function M.judge(n, per, total, free, setting, how)
  local need, fit = n * per, math.floor(free / per)
  local r = { limit = "address_pool", setting = setting, value = total, used = total - free, need = need,
    fit = fit, per_session = per }
  if need <= free then
    r.status = "ok"
    r.message = ("%s hold %d networks with %d in use: %d more %s add%s %d (%d each); room for %d more sessions")
      :format(setting, total, total - free, n, n == 1 and "session" or "sessions", n == 1 and "s" or "", need, per, fit)
  else
    r.status = "exceeded"
    r.message = ("%s hold %d networks with %d in use: %d more sessions need %d more (%d each), room for %d: %s")
      :format(setting, total, total - free, n, need, per, fit, how)
  end
  return r
end

return M
