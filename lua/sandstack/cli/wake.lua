-- sandstack wake NAME: start a hibernated stack again (docs/lifecycle.md).
return {
  order = 63,
  summary = "start a hibernated stack again; prints its new endpoint",
  usage = "wake NAME [--json]",
  help = [[The containers start in dependency order with their health and readiness waits; the
forwarder gets a new port. The proxy kept the egress policy and credentials in force.]],
  json = true,
  run = function(ctx, args, opt)
    local stack, code = require("sandstack.cli_lifecycle").open(ctx, args)
    if not stack then return code end
    local ok, err = stack:wake()
    local project, endpoint = stack.project, stack.endpoint
    stack:close()
    if not ok then return ctx:fail(err) end
    if opt.json then return ctx:json { project = project, endpoint = endpoint } end
    ctx.out:write("endpoint ", tostring(endpoint), "\n")
    return 0
  end,
}
