-- sandstack fork NAME NEW_KEY: a new session from a snapshot of NAME (docs/lifecycle.md).
return {
  order = 65,
  summary = "snapshot a stack and start a new session from it (its own token and subnet)",
  usage = "fork NAME NEW_KEY [--api-key-env VAR] [--json]",
  help = [[The new session is named NEW_KEY (its project too). A snapshot keeps no secret: a stack
that had an api_key needs it again, read from the environment variable VAR. The snapshot stays
(the fork's sandbox runs its image): remove it with snapshots rm once the fork is down.

  --api-key-env VAR   the api_key for the fork, from $VAR]],
  options = { ["api-key-env"] = "VAR" },
  json = true,
  run = function(ctx, args, opt)
    if not args[2] then return ctx:usage("fork needs a NAME and a NEW_KEY") end
    local o = { project_name = args[2] }
    if opt["api-key-env"] then
      o.api_key = os.getenv(opt["api-key-env"])
      if not o.api_key then return ctx:usage("$" .. opt["api-key-env"] .. " is not set") end
    end
    local stack, code = require("sandstack.cli_lifecycle").open(ctx, args, 1)
    if not stack then return code end
    local child, snap = stack:fork(args[2], o)
    stack:close()
    if not child then return ctx:fail(snap) end
    local project, endpoint = child.project, child.endpoint
    child:close()
    if opt.json then return ctx:json { project = project, endpoint = endpoint, snapshot = snap.id } end
    ctx.out:write(("project  %s\nendpoint %s\nsnapshot %s\n"):format(project, endpoint, snap.id))
    return 0
  end,
}
