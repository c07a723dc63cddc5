-- sandstack snapshot NAME: the sandbox's files and the stack's volumes as a snapshot (docs/lifecycle.md).
return {
  order = 64,
  summary = "snapshot a stack: its sandbox's files and volumes; prints the snapshot's id",
  usage = "snapshot NAME [--name LABEL] [--json]",
  help = [[The stack is paused while the sandbox is committed as an image and each volume copied.
The snapshot holds no secret. sandstack snapshots lists them; snapshots rm removes one.

  --name LABEL   a name for the snapshot (default: its id)]],
  options = { name = "LABEL" },
  json = true,
  run = function(ctx, args, opt)
    local stack, code = require("sandstack.cli_lifecycle").open(ctx, args)
    if not stack then return code end
    local snap, err = stack:snapshot { name = opt.name }
    stack:close()
    if not snap then return ctx:fail(err) end
    if opt.json then
      return ctx:json { id = snap.id, name = snap.name, source = snap.source, image = snap.image, created = snap.created }
    end
    ctx.out:write(snap.id, "\n")
    return 0
  end,
}
