-- sandstack hibernate NAME: stop a stack but keep its files, networks and record (docs/lifecycle.md).
local kit = require "sandstack.cli_kit"
return {
  order = 62,
  summary = "stop a stack's containers (memory freed), keep its files; wake brings it back",
  usage = "hibernate NAME [--timeout AGE] [--json]",
  help = [[Every container but the proxy sandstack added is stopped; networks, volumes and the
record stay.

  --timeout AGE  the engine's grace period before it kills (default 5s): 1s, 30s, or seconds]],
  options = { timeout = "AGE" },
  json = true,
  run = function(ctx, args, opt)
    local t
    if opt.timeout then
      t = kit.duration(opt.timeout)
      if not t then return ctx:usage("--timeout takes a duration (5s, 1m) or seconds, got " .. opt.timeout) end
    end
    local stack, code = require("sandstack.cli_lifecycle").open(ctx, args)
    if not stack then return code end
    local ok, err = stack:hibernate { timeout = t }
    local project = stack.project
    stack:close()
    if not ok then return ctx:fail(err) end
    if opt.json then return ctx:json { project = project, state = "hibernated" } end
    ctx.out:write("hibernated ", project, "\n")
    return 0
  end,
}
