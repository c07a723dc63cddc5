-- sandstack snapshots [rm ID...]: list or remove snapshots (docs/lifecycle.md).
local kit = require "sandstack.cli_kit"
return {
  order = 66,
  summary = "list snapshots (by label), or remove some: snapshots rm ID...",
  usage = "snapshots [--source PROJECT] [--json] | snapshots rm ID... [--json]",
  help = [[  --source PROJECT   only the snapshots of that stack]],
  options = { source = "PROJECT" },
  json = true,
  run = function(ctx, args, opt)
    local docker = ctx:docker()
    if args[1] == "rm" then
      if not args[2] then return ctx:usage("snapshots rm needs at least one ID") end
      local ids = {}
      for i = 2, #args do ids[#ids + 1] = args[i] end
      local removed, err = docker.remove_snapshot(ids)
      if not removed then return ctx:fail(err) end
      if opt.json then return ctx:json { removed = kit.array(removed) } end
      for _, id in ipairs(removed) do ctx.out:write("removed ", id, "\n") end
      return 0
    end
    if args[1] then return ctx:usage("snapshots takes no argument but rm, got " .. args[1]) end
    local list, err = docker.snapshots { source = opt.source }
    if not list then return ctx:fail(err) end
    if opt.json then
      for _, s in ipairs(list) do s.volumes = kit.array(s.volumes) end
      return ctx:json(kit.array(list))
    end
    ctx.out:write(("%-20s %-24s %-36s %s\n"):format("ID", "NAME", "SOURCE", "CREATED"))
    for _, s in ipairs(list) do
      ctx.out:write(("%-20s %-24s %-36s %s\n"):format(s.id, tostring(s.name), tostring(s.source),
        s.created and os.date("!%Y-%m-%d %H:%M:%S", s.created) or "?"))
    end
    return 0
  end,
}
