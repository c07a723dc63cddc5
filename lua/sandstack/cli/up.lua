-- sandstack up FILE.lua: start the stack the file's options table describes.
local kit = require "sandstack.cli_kit"

return {
  order = 10,
  summary = "start the stack FILE.lua returns (an options table); prints its project and endpoint",
  usage = "up FILE.lua [--session KEY] [--json]",
  help = [[FILE.lua returns the options of sandstack.docker.start (docs/docker.md) and may return
the session key as a second value. The key is, in order: --session, the file's second value,
the file's name without .lua. Progress goes to stderr with --json, to stdout otherwise; the wait
for the agent names its port and path (ready_path, default /health; ready_timeout, default 60 s).

  --session KEY  the session key (the project is sandstack-KEY unless the file names one)]],
  options = { session = "KEY" },
  json = true,
  run = function(ctx, args, opt)
    local file = args[1]
    if not file then return ctx:usage("up needs a FILE.lua") end
    if args[2] then return ctx:usage("up takes one FILE.lua, got also " .. args[2]) end
    local opts, key = ctx:load(file, "an options table")
    if not opts then return ctx:fail(key) end
    if type(key) ~= "string" then key = nil end
    key = opt.session or key or file:match("([^/]+)%.lua$") or "stack"
    local shown = opt.json and ctx.err or ctx.out
    if opts.on_event == nil then opts.on_event = kit.progress(shown, shown == io.stdout and kit.isatty(1)) end
    local stack, err = ctx:docker().start(key, opts)
    if not stack then return ctx:fail(err) end
    if opt.json then
      return ctx:json { project = stack.project, session_key = key, endpoint = stack.endpoint, port = stack.port }
    end
    ctx.out:write(("project  %s\nendpoint %s\n"):format(stack.project, stack.endpoint))
    return 0
  end,
}
