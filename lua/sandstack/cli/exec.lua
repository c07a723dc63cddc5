-- sandstack exec NAME -- CMD...: one command in a stack's sandbox (or a sidecar), through h:exec.
local view = require "sandstack.docker.view"

return {
  order = 60,
  summary = "run a command in a stack's sandbox (or a named sidecar) and print its output",
  usage = "exec NAME [--service S] [--timeout SECONDS] [--max-bytes N] [--user U] [--cwd DIR] [--json] -- CMD [ARG...]",
  help = [[NAME is the stack's session key or its project name. CMD runs as given (no shell is added;
use -- sh -c '...' for one). Its stdout and stderr are printed as they came, and sandstack exits
with the command's exit code. A timeout (default 60 s) or an output budget passed (default
8 MiB) kills the command's processes in the sandbox; sandstack then prints the output so far, an
error line, and exits 125, as it does for any failure of its own.

  --service S        a sidecar instead of the sandbox
  --timeout SECONDS  end the command after this long
  --max-bytes N      stdout and stderr together at most N bytes
  --json             one JSON document: {code, stdout, stderr, killed, seconds}]],
  options = { service = "S", timeout = "SECONDS", ["max-bytes"] = "N", user = "U", cwd = "DIR" },
  json = true,
  run = function(ctx, args, opt)
    local name = table.remove(args, 1)
    if not name then return ctx:usage("exec needs a NAME and a command after --") end
    if #args == 0 then return ctx:usage("exec needs a command after the NAME (exec NAME -- CMD ...)") end
    local nums = {}
    for _, k in ipairs { "timeout", "max-bytes" } do
      if opt[k] then
        nums[k] = tonumber(opt[k])
        if not nums[k] or nums[k] <= 0 then return ctx:usage("--" .. k .. " must be a positive number, got " .. opt[k]) end
      end
    end
    local h, code = view.cli_handle(ctx, name)
    if not h then return code end
    local r, err = h:exec(args, { service = opt.service, timeout = nums.timeout,
      max_bytes = nums["max-bytes"] and math.floor(nums["max-bytes"]), user = opt.user, cwd = opt.cwd })
    h.eng:close()
    if opt.json then
      local x = r or err
      if not r and x.stdout == nil then ctx:fail(err) return 125 end
      ctx:json { code = r and r.code or require("sandstack.cli_kit").NULL, stdout = x.stdout, stderr = x.stderr,
        killed = x.killed or false, seconds = x.seconds, error = not r and tostring(err) or nil }
      return r and r.code or 125
    end
    if not r then
      ctx.out:write(err.stdout or "")
      ctx.err:write(err.stderr or "")
      ctx:fail(err)
      return 125
    end
    ctx.out:write(r.stdout)
    ctx.err:write(r.stderr)
    return r.code
  end,
}
