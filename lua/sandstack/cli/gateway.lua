-- sandstack gateway: render nginx.conf for the OpenResty gateway and run nginx in the foreground.
return {
  order = 90,
  summary = "render the OpenResty gateway's nginx.conf from a config file and run nginx",
  usage = "gateway --config FILE.lua [--prefix DIR] [--render]",
  help = [[FILE.lua returns the gateway's configuration (docs/gateway.md). The checked configuration
(as JSON) and nginx.conf go to DIR/conf.

  --config FILE.lua  the gateway's configuration
  --prefix DIR       nginx's prefix (default ./sandstack-gateway)
  --render           only write the files, do not run nginx]],
  options = { config = "FILE.lua", prefix = "DIR", render = true },
  run = function(ctx, args, opt)
    if args[1] then return ctx:usage("gateway takes no argument, got " .. args[1]) end
    if not opt.config then return ctx:usage("gateway needs --config FILE.lua") end
    local config = require "sandstack.gateway.config"
    local c, err = config.load(opt.config)
    if not c then return ctx:fail(err) end
    local prefix = (opt.prefix or "sandstack-gateway"):gsub("/+$", "")
    if not prefix:match("^/") then prefix = os.getenv("PWD") .. "/" .. prefix end
    for _, d in ipairs { "conf", "logs", "tmp" } do
      if not os.execute("mkdir -p '" .. (prefix .. "/" .. d):gsub("'", "'\\''") .. "'") then
        return ctx:fail("io", "cannot create " .. prefix .. "/" .. d)
      end
    end
    -- nginx's LuaJIT needs this module's Lua files and a LuaJIT build of sandstack/core.so: from a
    -- checkout ./build-luajit; installed, nginx's own search path (";;", which holds
    -- /usr/local/lib/lua/5.1, where bootstrap.sh and `luarocks --lua-version=5.1 make` put it)
    local here = (package.searchpath("sandstack.gateway", package.path) or ""):match("^(.*)/sandstack/gateway%.lua$")
    local top = here and here:match("^(.*)/lua$")
    local cpath = c.lua_cpath or ((top and (top .. "/build-luajit/?.so") or "") .. ";;")
    local lpath = c.lua_path or ((here and (here .. "/?.lua;" .. here .. "/?/init.lua") or "") .. ";;")
    -- unprivileged workers read the modules and keep request and response bodies under the
    -- prefix: any of them in root's home (0700) would fail them, so it is found out here
    local user, why, chosen = config.worker_user(c)
    local closed, mode, what = config.unreachable({ prefix = prefix, lua_path = lpath, lua_cpath = cpath,
      console_root = c.console_root }, user)
    if closed and chosen then
      user, why = "root", ("its %s is under %s (mode %04o), which other users cannot enter"):format(what, closed, mode)
    elseif closed then
      return ctx:fail("invalid", ("gateway: the workers' user %s cannot enter %s (mode %04o), where its %s is: choose "
        .. "directories others may enter, or another user"):format(user, closed, mode, what))
    end
    local core = require "sandstack.core"
    local ok, werr = core.write_file_durable(prefix .. "/conf/gateway.json", core.json_encode(c))
    if not ok then return ctx:fail(werr) end
    local text = require("sandstack.gateway.nginx_conf").render(c, { config = prefix .. "/conf/gateway.json",
      source = opt.config, lua_path = lpath, lua_cpath = cpath, user = user })
    ok, werr = core.write_file_durable(prefix .. "/conf/nginx.conf", text)
    if not ok then return ctx:fail(werr) end
    ctx.out:write("rendered ", prefix, "/conf/nginx.conf (workers: ", user,
      why and (", as " .. why) or "", ")\n")
    if opt.render then return 0 end
    if ctx.out.flush then ctx.out:flush() end
    local q = "'" .. prefix:gsub("'", "'\\''") .. "/'"
    -- exec: nginx is the child os.execute waits for, so its own end is what is reported (a shell
    -- in between dies of the Ctrl-C itself while nginx shuts down cleanly)
    local r1, how, code = os.execute("exec nginx -p " .. q .. " -c conf/nginx.conf")
    if r1 == true or r1 == 0 then -- nginx shut down: a Ctrl-C, SIGTERM or SIGQUIT to it ends it so
      ctx.out:write("stopped: nginx shut down\n")
      return 0
    end
    if how == "signal" and (code == 2 or code == 15) then
      ctx.out:write(("stopped: nginx ended by %s\n"):format(code == 2 and "SIGINT (Ctrl-C)" or "SIGTERM"))
      return 128 + code
    end
    return ctx:fail("failed", ("nginx %s %s: see %s/logs/error.log"):format(how == "signal" and "was killed by signal"
      or "exited with", tostring(code), prefix))
  end,
}
