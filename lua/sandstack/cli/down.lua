-- sandstack down NAME: remove one stack, named by its session key or its project.
return {
  order = 20,
  summary = "remove every container, network and volume of one stack",
  usage = "down NAME [--json]",
  help = [[NAME is the stack's session key or its project name (sandstack ls shows both). A NAME
that matches no stack is an error (exit 1) and nothing is removed.]],
  json = true,
  run = function(ctx, args, opt)
    local s, code = ctx:named(args)
    if not s then return code end
    local ok, err = ctx:docker().down(s.project)
    if not ok then return ctx:fail(err) end
    if opt.json then return ctx:json { removed = { s.project } } end
    ctx.out:write("removed ", s.project, "\n")
    return 0
  end,
}
