-- sandstack check [--sessions N] [--subnet-pool CIDR]: the host limits N more sessions would
-- meet, each with its value, what is in use and the setting to raise
-- (sandstack.docker.host_limits, sandstack.docker.address_pools).
local limits = require "sandstack.docker.host_limits"
local address_pools = require "sandstack.docker.address_pools"
local kit = require "sandstack.cli_kit"
local core = require "sandstack.core"

-- The address pool's record: the engine's pools (or subnet_pool) against its networks now.
local function pool_record(rd, n, subnet_pool)
  local per = limits.PER_SESSION.networks
  local eng, err = require("sandstack.engine").connect {}
  local subnets
  if eng then
    subnets, err = require("sandstack.docker.apply").used_subnets(eng)
    eng:close()
  end
  local setting = "the engine's default address pools"
  if not subnets then
    return { limit = "address_pool", setting = setting, status = "unknown",
      message = setting .. " not checked: " .. tostring(err and err.message or err) }
  end
  if subnet_pool then
    local total, free = address_pools.capacity({ { base = subnet_pool, size = 28 } }, subnets)
    return address_pools.judge(n, per, total, free, "the /28s of subnet_pool " .. subnet_pool,
      "give sandstack a larger subnet_pool")
  end
  if not (rd.engine and rd.engine.args) then
    return { limit = "address_pool", setting = setting, status = "unknown",
      message = setting .. " not checked: the engine's command line is not readable here ("
        .. (rd.local_engine and tostring(rd.engine.error or (rd.engine.unread or {}).args) or "not on this host") .. ")" }
  end
  local pid = rd.engine.pid
  local pools, source = address_pools.engine_pools(rd.engine.args, function(path) return core.engine_file(pid, path) end)
  if not pools then
    return { limit = "address_pool", setting = setting, status = "unknown", message = setting .. " not checked: " .. source }
  end
  local total, free = address_pools.capacity(pools, subnets)
  return address_pools.judge(n, per, total, free, setting .. " (" .. source .. ")",
    "give the engine larger pools (`default-address-pools` in daemon.json, then restart it) or give sandstack a subnet_pool")
end

return {
  order = 85,
  summary = "the host limits N more sessions would meet, and the settings to raise",
  usage = "check [--sessions N] [--subnet-pool CIDR] [--json]",
  help = [[Reads the host's limits a session meets: kernel.pid_max and kernel.threads-max against the
tasks running, net.ipv4.neigh.default.gc_thresh3 against the neighbour table's entries,
fs.inotify.max_user_instances (cgroup v2), the engine's open-file limit against its open files,
and the engine's address pools (or --subnet-pool CIDR) against its networks. Each line is ok,
exceeded (with the setting to raise and a value that fits), unknown (not readable here: why)
or not_applicable. --sessions N: the sessions planned beyond those running (default 1, what
every start checks). Exit 1 when a limit is exceeded. --json prints {sessions, per_session,
fits, limits: [{limit, setting, status, value, used, need, fit, per_session, message}]}.]],
  options = { sessions = "N", ["subnet-pool"] = "CIDR" },
  json = true,
  run = function(ctx, args, opt)
    if #args ~= 0 then return ctx:usage("check takes no arguments") end
    local n = tonumber(opt.sessions or "1")
    if not n or n < 1 or n ~= math.floor(n) then return ctx:usage("--sessions takes a whole number of 1 or more") end
    local pool_bits = opt["subnet-pool"] and select(2, address_pools.cidr(opt["subnet-pool"]))
    if opt["subnet-pool"] and not (pool_bits and pool_bits <= 28) then
      return ctx:usage("--subnet-pool takes an IPv4 CIDR of /28 or larger")
    end
    local rd = limits.read()
    local out = limits.judge_all(rd, n)
    out[#out + 1] = pool_record(rd, n, opt["subnet-pool"])
    local fits = true
    for _, r in ipairs(out) do fits = fits and r.status ~= "exceeded" end
    if opt.json then
      ctx:json { sessions = n, per_session = limits.PER_SESSION, fits = fits, limits = kit.array(out) }
    else
      for _, r in ipairs(out) do ctx.out:write(("%-15s %s\n"):format(r.status, r.message)) end
    end
    return fits and 0 or 1
  end,
}
