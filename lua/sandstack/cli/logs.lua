-- sandstack logs NAME: a service's output as the engine kept it, through h:logs.
local view = require "sandstack.docker.view"

return {
  order = 62,
  summary = "print a service's logs (the sandbox's unless --service names another)",
  usage = "logs NAME [--service S] [--tail N] [--since UNIX_SECONDS] [--follow]",
  help = [[NAME is the stack's session key or its project name. stdout and stderr of the service are
printed to stdout and stderr. --follow keeps printing what comes until interrupted.

  --service S   a sidecar (or the forwarder, the proxy) instead of the sandbox
  --tail N      only the last N lines
  --since T     only what came after the unix time T]],
  options = { service = "S", tail = "N", since = "UNIX_SECONDS", follow = true },
  run = function(ctx, args, opt)
    if #args ~= 1 then return ctx:usage("logs takes one NAME") end
    local tail, since = tonumber(opt.tail), tonumber(opt.since)
    if opt.tail and (not tail or tail < 0 or tail ~= math.floor(tail)) then return ctx:usage("--tail must be a whole number") end
    if opt.since and not since then return ctx:usage("--since must be a unix time in seconds") end
    local h, code = view.cli_handle(ctx, args[1])
    if not h then return code end
    local r, err = h:logs { service = opt.service, tail = tail, since = since, follow = opt.follow or nil }
    if not r then h.eng:close(); return ctx:fail(err) end
    if not opt.follow then
      h.eng:close()
      ctx.out:write(r.stdout)
      ctx.err:write(r.stderr)
      return 0
    end
    while true do
      local c; c, err = r:read(5)
      if not c then h.eng:close(); return ctx:fail(err) end
      ctx.out:write(c.stdout)
      ctx.err:write(c.stderr)
      if ctx.out.flush then ctx.out:flush() end
    end
  end,
}
