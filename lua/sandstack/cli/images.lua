-- sandstack images: build the stack's default images from this machine's binaries.
return {
  order = 70,
  summary = "build the default proxy and forwarder images on this engine (no registry is needed)",
  usage = "images [--proxy-binary PATH] [--force]",
  help = [[  --proxy-binary PATH  the sandstack-proxy binary to put in the proxy image
  --force              build again even when the images are up to date]],
  options = { ["proxy-binary"] = "PATH", force = true },
  run = function(ctx, args, opt)
    if args[1] then
      -- the older form "--force 1" is still taken
      if not (opt.force and (args[1] == "1" or args[1] == "0") and not args[2]) then
        return ctx:usage("images takes no argument, got " .. args[1])
      end
      if args[1] == "0" then opt.force = nil end
    end
    local res, err = ctx:docker().build_images { proxy_binary = opt["proxy-binary"], force = opt.force == true }
    if not res then return ctx:fail(err) end
    for _, r in ipairs(res) do
      ctx.out:write(("%-26s %s (from %s)\n"):format(r.image, r.built and "built" or "up to date", r.source))
    end
    return 0
  end,
}
