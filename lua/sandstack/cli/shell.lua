-- sandstack shell NAME [-- CMD ...]: an interactive shell (or CMD) in a stack's sandbox, over
-- h:spawn's hijacked exec (docs/process.md). On a terminal: raw mode, the terminal's size, and
-- a resize on every SIGWINCH; otherwise stdin and stdout are a plain pipe to the process.
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"

-- bash when the image has it, else sh
local DEFAULT = { "sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi" }

local function container(ctx, eng, project, service)
  local labels = { "io.sandstack.project=" .. project,
    service and ("io.sandstack.service=" .. service) or "io.sandstack.role=sandbox" }
  local cs, err = ops.call(eng, "list_running_containers", nil, { labels = labels })
  if not cs then return nil, ctx:fail(err) end
  if #cs == 0 then
    return nil, ctx:fail("not_running", ("stack %s has no running %s container (sandstack status %s shows its state)")
      :format(project, service or "sandbox", project))
  end
  return cs[1].Id
end

-- Copies between the terminal (or pipe) and the process until the process's output ends.
local function pump(p, tty)
  local conn_fd = p.conn:fd()
  local winch = tty and core.term_winch() or nil
  local stdin_open = true
  while true do
    local fds = { conn_fd }
    if stdin_open then fds[#fds + 1] = 0 end
    if winch then fds[#fds + 1] = winch:fd() end
    local ready = p.conn:buffered() > 0 and { [conn_fd] = true } or assert(core.fd_poll(fds))
    -- a resize first: keys typed after it are meant for the new size
    if winch and ready[winch:fd()] and winch:take() then
      local cols, rows = core.term_size(0)
      if cols then p:resize(cols, rows) end
    end
    if ready[0] then
      local data = assert(core.fd_read(0))
      if data == "" then
        stdin_open = false
        if not tty then assert(p:close_stdin()) end
      else
        assert(p:write(data))
      end
    end
    if ready[conn_fd] then
      local data, stream = p:read(0)
      if data then
        assert(core.fd_write(stream == "stderr" and 2 or 1, data))
      elseif stream.reason == "closed" then
        break
      elseif stream.reason ~= "timeout" then
        error(stream, 0)
      end
    end
  end
  if winch then winch:close() end
end

return {
  order = 55,
  summary = "an interactive shell (or a command) in a stack's sandbox, on a terminal",
  usage = "shell NAME [--service S] [--user U] [--cwd DIR] [-- CMD ARG ...]",
  help = [[NAME is the stack's session key or its project name. Without CMD it runs bash when the
image has it, else sh. On a terminal the shell gets a terminal of the same size, in raw mode
(keys go through as typed; Ctrl-C reaches the shell), resized whenever yours is; without one,
stdin and stdout are a pipe (stdin's end is passed on). Exit code: the process's own, or 1 when
sandstack failed (the line on stderr says why), 2 for a usage error.]],
  options = { service = "S", user = "U", cwd = "DIR" },
  run = function(ctx, args, opt)
    if not args[1] then return ctx:usage("shell needs a NAME (a session key or a project)") end
    local s, code = ctx:stack(args[1])
    if not s then return code end
    local argv = DEFAULT
    if #args > 1 then
      argv = {}
      for i = 2, #args do argv[i - 1] = args[i] end
    end
    local sandstack = require "sandstack"
    local process = require "sandstack.docker.process"
    local eng, err = sandstack.engine {}
    if not eng then return ctx:fail(err) end
    local id; id, code = container(ctx, eng, s.project, opt.service)
    if not id then eng:close(); return code end
    local cols, rows = core.term_size(0)
    local tty = cols ~= nil
    local p; p, err = process.spawn(process.engine_io(eng), id, argv,
      { tty = tty, cols = cols, rows = rows, user = opt.user, cwd = opt.cwd, timeout = 30 })
    if not p then eng:close(); return ctx:fail(err) end
    local saved = tty and assert(core.term_raw(0)) or nil
    local ok, perr = pcall(pump, p, tty)
    if saved then core.term_restore(0, saved) end
    if not ok then p:close(); eng:close(); return ctx:fail(perr) end
    local exit; exit, err = p:wait(30)
    p:close()
    eng:close()
    if not exit then return ctx:fail(err) end
    return exit
  end,
}
