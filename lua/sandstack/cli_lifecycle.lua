-- What the commands of a session over time share (lua/sandstack/cli/pause.lua, resume,
-- hibernate, wake, snapshot, fork; docs/lifecycle.md): the handle on the stack a NAME names,
-- rebuilt from the record sandstack.docker.start or a warm pool's claim keeps on the engine
-- (sandstack.docker.open).
local M = {}

-- open(ctx, args, extra) -> stack handle | nil, exit code (after the error line). extra: how
-- many arguments after NAME the command takes.
function M.open(ctx, args, extra)
  if not args[1] then return nil, ctx:usage(ctx.name .. " needs a NAME (a session key or a project)") end
  if args[2 + (extra or 0)] then return nil, ctx:usage(ctx.name .. " got an extra argument " .. args[2 + (extra or 0)]) end
  local s, code = ctx:stack(args[1])
  if not s then return nil, code end
  local stack, err = ctx:docker().open(s.project)
  if not stack then return nil, ctx:fail(err) end
  return stack
end

-- A command that calls one method of the handle and prints "<done> <project>" (or JSON).
function M.simple(method, done, order, summary, help)
  return {
    order = order, summary = summary, usage = method .. " NAME [--json]", help = help, json = true,
    run = function(ctx, args, opt)
      local stack, code = M.open(ctx, args)
      if not stack then return code end
      local ok, err = stack[method](stack)
      local project = stack.project
      stack:close()
      if not ok then return ctx:fail(err) end
      if opt.json then return ctx:json { project = project, state = done } end
      ctx.out:write(done, " ", project, "\n")
      return 0
    end,
  }
end

return M
