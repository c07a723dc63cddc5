-- sandstack cp: a file or a directory between the host and a stack's container, through
-- h:upload/h:download (docker cp's rules: onto a directory a copy goes into it).
local view = require "sandstack.docker.view"

-- "NAME:/path" -> NAME, /path; anything else -> nil (a host path).
local function remote(s)
  local name, path = s:match("^([^/:][^:]*):(/.*)$")
  return name, path
end

return {
  order = 61,
  summary = "copy a file or a directory between the host and a stack's sandbox (or a sidecar)",
  usage = "cp NAME:/PATH LOCAL | cp LOCAL NAME:/PATH [--service S] [--mode OCTAL] [--max-bytes N]",
  help = [[NAME is the stack's session key or its project name; PATH an absolute path in the container.
A file, or a directory as a tree with its permission bits, is copied, streamed (never held in
memory), as docker cp does: onto a directory that exists it goes into it, under its own name; a
file replaces a file, never a directory; a directory goes only where nothing stands on the host.
Into the container, a file keeps the host file's mode (or --mode, e.g. 0644). Out of it, a link
is refused, and at most 1 GiB of files is taken unless --max-bytes raises it.

  --service S      a sidecar instead of the sandbox
  --max-bytes N    the download's budget of file bytes]],
  options = { service = "S", mode = "OCTAL", ["max-bytes"] = "N" },
  run = function(ctx, args, opt)
    if #args ~= 2 then return ctx:usage("cp takes a source and a destination, one of them NAME:/PATH") end
    local sname, spath = remote(args[1])
    local dname, dpath = remote(args[2])
    if (sname and dname) or not (sname or dname) then
      return ctx:usage("exactly one of the source and the destination must be NAME:/PATH")
    end
    local mode
    if opt.mode then
      mode = opt.mode:match("^0?[0-7][0-7][0-7][0-7]?$") and tonumber(opt.mode, 8)
      if not mode then return ctx:usage("--mode must be octal permissions such as 0644, got " .. opt.mode) end
    end
    local max = opt["max-bytes"] and tonumber(opt["max-bytes"])
    if opt["max-bytes"] and not (max and max >= 1 and max == math.floor(max)) then
      return ctx:usage("--max-bytes must be a positive whole number, got " .. opt["max-bytes"])
    end
    local h, code = view.cli_handle(ctx, sname or dname)
    if not h then return code end
    local ok, err
    if sname then
      ok, err = h:download(spath, args[2], { service = opt.service, max_bytes = max })
    else
      ok, err = h:upload(args[1], dpath, { service = opt.service, mode = mode })
    end
    h.eng:close()
    if not ok then return ctx:fail(err) end
    return 0
  end,
}
