-- sandstack stats NAME: one sample of each service's usage, through h:stats.
local view = require "sandstack.docker.view"

local function mib(n) return ("%.1fMiB"):format((n or 0) / 1048576) end

return {
  order = 63,
  summary = "CPU, memory, network and pids of each service of one stack (one sample)",
  usage = "stats NAME [--json]",
  help = [[NAME is the stack's session key or its project name. The sample takes about two seconds
(the engine measures CPU over an interval). --json prints {service: {cpuUsedPct, cpuCount,
memUsed, memTotal, netRx, netTx, pids, timestamp}}, the names of E2B's getMetrics where they fit.]],
  json = true,
  run = function(ctx, args, opt)
    if #args ~= 1 then return ctx:usage("stats takes one NAME") end
    local h, code = view.cli_handle(ctx, args[1])
    if not h then return code end
    local st, err = h:stats()
    h.eng:close()
    if not st then return ctx:fail(err) end
    if opt.json then return ctx:json(st) end
    local names = {}
    for k in pairs(st) do names[#names + 1] = k end
    table.sort(names)
    ctx.out:write(("%-14s %7s %21s %10s %10s %5s\n"):format("SERVICE", "CPU %", "MEM / LIMIT", "NET RX", "NET TX", "PIDS"))
    for _, k in ipairs(names) do
      local m = st[k]
      if m.state then
        ctx.out:write(("%-14s %s\n"):format(k, m.state))
      else
        ctx.out:write(("%-14s %6.2f%% %10s / %-10s %10s %10s %5d\n"):format(k, m.cpuUsedPct, mib(m.memUsed), mib(m.memTotal),
          mib(m.netRx), mib(m.netTx), m.pids))
      end
    end
    return 0
  end,
}
