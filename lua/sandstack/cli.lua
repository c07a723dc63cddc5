-- The `sandstack` command: up, down, ls, status, reap, pool, conform. main(argv) returns an exit code.
local M = {}

local USAGE = [[
usage: sandstack <command> [options]
  up FILE.lua [--session KEY]    start the stack FILE returns (an options table); prints the endpoint
  down PROJECT                   remove every container, network and volume of PROJECT
  ls                             list the stacks sandstack owns on the engine, grouped by pool
  status PROJECT                 state and health of each service, and the forwarder's port
  reap [--older-than S] [--project P] [--prefix P] [--pool NAME]
                                 remove owned stacks (all, or those matching; --pool: that
                                 pool's stacks no session holds)
  pool fill FILE.lua [--size N] [--concurrency C]
                                 FILE returns the pool options ({name =, size =, stack = {...}});
                                 start stacks (C at once, default 4) until N are ready; prints
                                 the pool's status
  pool drain NAME                remove every stack of pool NAME that no session holds
  gateway --config FILE.lua [--prefix DIR] [--render]
                                 render nginx.conf for the OpenResty gateway from FILE (docs/
                                 gateway.md) into DIR/conf (default ./sandstack-gateway) and
                                 run nginx in the foreground (--render: only write it)
  images [--proxy-binary PATH] [--force 1]
                                 build the default proxy and forwarder images on this engine
                                 from this machine's binaries (no registry is needed)
  pause|resume|hibernate|wake|snapshot|fork|snapshots ...
                                 a session over time (sandstack CMD --help; docs/lifecycle.md)
  conform [--backend docker|sbx|swarm] [--image IMG] [--forwarder-image IMG] [--subnet-pool CIDR]
          [--runtime NAME]       re-check the isolation promises on this engine, as TAP
                                 (--runtime: every container under that engine runtime, e.g. runsc)
The engine is $DOCKER_HOST or unix:///var/run/docker.sock.]]

local function parse(argv, from, flags)
  local pos, opt = {}, {}
  local i = from
  while i <= #argv do
    local a = argv[i]
    local key = a:match("^%-%-([%w%-]+)$")
    if key then
      if not flags[key] then return nil, "unknown option --" .. key end
      if argv[i + 1] == nil then return nil, "--" .. key .. " needs a value" end
      opt[key] = argv[i + 1]
      i = i + 2
    else
      pos[#pos + 1] = a
      i = i + 1
    end
  end
  return pos, opt
end

local function isatty(fd)
  return os.execute(("test -t %d"):format(fd)) == true or os.execute(("test -t %d"):format(fd)) == 0
end

-- Progress: one line per service redrawn in place on a terminal, plain lines otherwise.
local function progress(out, tty)
  local order, state, drawn = {}, {}, 0
  return function(ev)
    local svc = ev.service or (ev.network and "network") or (ev.volume and "volume") or ev.phase
    local what = ev.phase:gsub("_", " ")
    if ev.network then what = what .. " " .. ev.network end
    if ev.volume then what = what .. " " .. ev.volume end
    if ev.port then what = what .. " on port " .. ev.port end
    if not tty then
      out:write(("%7.2fs %-12s %s\n"):format(ev.elapsed or 0, svc, what))
      return
    end
    if not state[svc] then order[#order + 1] = svc end
    state[svc] = ("%7.2fs %s"):format(ev.elapsed or 0, what)
    if drawn > 0 then out:write(("\27[%dA"):format(drawn)) end
    for _, s in ipairs(order) do out:write(("\27[2K%-12s %s\n"):format(s, state[s])) end
    drawn = #order
    out:flush()
  end
end

local out, errout -- set by main for the duration of one call

local function fail(err)
  errout:write("sandstack: ", tostring(err), "\n")
  return 1
end

local function cmd_up(argv, docker)
  local pos, opt = parse(argv, 2, { session = true })
  if not pos then return fail(opt) end
  local file = pos[1]
  if not file then return fail("up needs a FILE.lua") end
  local chunk, lerr = loadfile(file)
  if not chunk then return fail(lerr) end
  local ok, opts, key = pcall(chunk)
  if not ok then return fail(opts) end
  if type(opts) ~= "table" then return fail(file .. " must return an options table") end
  key = opt.session or key or file:match("([^/]+)%.lua$") or "stack"
  opts.on_event = opts.on_event or progress(out, out == io.stdout and isatty(1))
  local stack, err = docker.start(key, opts)
  if not stack then return fail(err) end
  out:write(("project  %s\nendpoint %s\n"):format(stack.project, stack.endpoint))
  return 0
end

local function age(created)
  if not created then return "?" end
  local s = os.time() - created
  if s < 120 then return s .. "s" end
  if s < 7200 then return math.floor(s / 60) .. "m" end
  return math.floor(s / 3600) .. "h"
end

local function services_text(services)
  local names = {}
  for k, v in pairs(services) do names[#names + 1] = k .. ":" .. tostring(v) end
  table.sort(names)
  return table.concat(names, " ")
end

-- Plain stacks first, then one block per warm pool (docker.list sorts by pool, then project).
local function cmd_ls(docker)
  local stacks, err = docker.list()
  if not stacks then return fail(err) end
  local header = ("%-36s %-20s %5s  %s\n"):format("PROJECT", "SESSION", "AGE", "SERVICES")
  out:write(header)
  local pool
  for _, s in ipairs(stacks) do
    if s.pool and s.pool ~= pool then
      pool = s.pool
      out:write(("\npool %s\n"):format(pool), header)
    end
    local session = s.pool and (s.state == "in_use" and tostring(s.session_key) or "(" .. tostring(s.state) .. ")")
      or tostring(s.session_key)
    out:write(("%-36s %-20s %5s  %s\n"):format(s.project, session, age(s.created), services_text(s.services)))
  end
  return 0
end

local function cmd_status(argv, docker)
  local project = argv[2]
  if not project then return fail("status needs a PROJECT") end
  local stacks, err = docker.list { project = project }
  if not stacks then return fail(err) end
  if #stacks == 0 then return fail("no stack named " .. project) end
  local eng = require("sandstack").engine {}
  local names = {}
  for svc in pairs(stacks[1].services) do names[#names + 1] = svc end
  table.sort(names)
  for _, svc in ipairs(names) do
    local info = eng and eng:call("GET", "/containers/" .. project .. "-" .. svc .. "/json")
    local st = info and info.State or {}
    local line = ("%-12s %-8s %s"):format(svc, tostring(st.Status), st.Health and st.Health.Status or "")
    local port = info and info.Config.Labels["io.sandstack.port"]
    local bind = port and info.NetworkSettings.Ports and info.NetworkSettings.Ports[port .. "/tcp"]
    if type(bind) == "table" and bind[1] then line = line .. " endpoint http://127.0.0.1:" .. bind[1].HostPort end
    out:write(line, "\n")
  end
  if eng then eng:close() end
  return 0
end

local function cmd_reap(argv, docker)
  local pos, opt = parse(argv, 2, { ["older-than"] = true, project = true, prefix = true, pool = true })
  if not pos then return fail(opt) end
  local removed, err = docker.reap { older_than = tonumber(opt["older-than"]), project = opt.project, prefix = opt.prefix,
    pool = opt.pool }
  if not removed then return fail(err) end
  for _, p in ipairs(removed) do out:write("removed ", p, "\n") end
  return 0
end

local function cmd_pool(argv, docker)
  local sub = argv[2]
  if sub == "drain" then
    if not argv[3] then return fail("pool drain needs a NAME") end
    local removed, err = docker.reap { pool = argv[3] }
    if not removed then return fail(err) end
    for _, p in ipairs(removed) do out:write("removed ", p, "\n") end
    return 0
  elseif sub ~= "fill" then
    return fail("pool needs fill or drain")
  end
  local pos, opt = parse(argv, 3, { size = true, concurrency = true })
  if not pos then return fail(opt) end
  local file = pos[1]
  if not file then return fail("pool fill needs a FILE.lua") end
  local chunk, lerr = loadfile(file)
  if not chunk then return fail(lerr) end
  local ok, opts = pcall(chunk)
  if not ok then return fail(opts) end
  if type(opts) ~= "table" then return fail(file .. " must return the pool options") end
  if opt.size then
    local n = tonumber(opt.size)
    if not n or n < 0 or n ~= math.floor(n) then return fail("--size must be a whole number") end
    opts.size = n
    if opts.max and opts.max < n then opts.max = n end
  end
  local pool, err = docker.pool(opts)
  if not pool then return fail(err) end
  local width
  if opt.concurrency then
    width = tonumber(opt.concurrency)
    if not width or width < 1 or width > 16 or width ~= math.floor(width) then
      return fail("--concurrency must be a whole number from 1 to 16")
    end
  end
  local n; n, err = pool:fill { concurrency = width }
  if not n then return fail(err) end
  local st = pool:status() or {}
  out:write(("started %d\nready %s starting %s in_use %s failed %s\n"):format(n, tostring(st.ready),
    tostring(st.starting), tostring(st.in_use), tostring(st.failed)))
  return 0
end

local function cmd_images(argv, docker)
  local pos, opt = parse(argv, 2, { ["proxy-binary"] = true, force = true })
  if not pos then return fail(opt) end
  local res, err = docker.build_images { proxy_binary = opt["proxy-binary"], force = opt.force ~= nil and opt.force ~= "0" }
  if not res then return fail(err) end
  for _, r in ipairs(res) do out:write(("%-26s %s (from %s)\n"):format(r.image, r.built and "built" or "up to date", r.source)) end
  return 0
end

local function cmd_conform(argv)
  local pos, opt = parse(argv, 2, { backend = true, image = true, ["forwarder-image"] = true, ["subnet-pool"] = true,
    runtime = true })
  if not pos then return fail(opt) end
  -- a runtime is the Docker engine's: sbx has its own microVMs, and silently ignoring it would lie
  if opt.runtime and opt.backend == "sbx" then return fail("--runtime applies to the docker backend only") end
  local ok = require("sandstack.conformance").run { backend = opt.backend, image = opt.image,
    forwarder_image = opt["forwarder-image"], subnet_pool = opt["subnet-pool"], runtime = opt.runtime }
  return ok and 0 or 1
end

-- `sandstack gateway`: the checked config as JSON and nginx.conf in PREFIX/conf, then nginx.
local function cmd_gateway(argv)
  local args, render_only = {}, false
  for _, a in ipairs(argv) do
    if a == "--render" then render_only = true else args[#args + 1] = a end
  end
  local pos, opt = parse(args, 2, { config = true, prefix = true })
  if not pos then return fail(opt) end
  if not opt.config then return fail("gateway needs --config FILE.lua") end
  local c, err = require("sandstack.gateway.config").load(opt.config)
  if not c then return fail(err) end
  local prefix = (opt.prefix or "sandstack-gateway"):gsub("/+$", "")
  if not prefix:match("^/") then prefix = os.getenv("PWD") .. "/" .. prefix end
  for _, d in ipairs { "conf", "logs", "tmp" } do
    if not os.execute("mkdir -p '" .. (prefix .. "/" .. d):gsub("'", "'\\''") .. "'") then
      return fail("cannot create " .. prefix .. "/" .. d)
    end
  end
  -- nginx's LuaJIT needs this module's Lua files and a LuaJIT build of sandstack/core.so
  local here = (package.searchpath("sandstack.gateway", package.path) or ""):match("^(.*)/sandstack/gateway%.lua$")
  local top = here and here:match("^(.*)/lua$")
  local cpath = c.lua_cpath or ((top and (top .. "/build-luajit/?.so;") or "") .. ";")
  local lpath = c.lua_path or ((here and (here .. "/?.lua;" .. here .. "/?/init.lua;") or "") .. ";")
  local core = require "sandstack.core"
  local ok, werr = core.write_file_durable(prefix .. "/conf/gateway.json", core.json_encode(c))
  if not ok then return fail(werr) end
  local text = require("sandstack.gateway.nginx_conf").render(c, { config = prefix .. "/conf/gateway.json",
    source = opt.config, lua_path = lpath, lua_cpath = cpath })
  ok, werr = core.write_file_durable(prefix .. "/conf/nginx.conf", text)
  if not ok then return fail(werr) end
  out:write("rendered ", prefix, "/conf/nginx.conf\n")
  if render_only then return 0 end
  out:flush()
  local q = "'" .. prefix:gsub("'", "'\\''") .. "/'"
  local r1, _, code = os.execute("nginx -p " .. q .. " -c conf/nginx.conf")
  if r1 == true or r1 == 0 then return 0 end
  return fail("nginx exited with " .. tostring(code))
end

-- main(argv[, out[, errout]]) -> exit code; out/errout default to io.stdout/io.stderr.
function M.main(argv, o, e)
  out, errout = o or io.stdout, e or io.stderr
  local cmd = argv[1]
  local docker = require("sandstack").docker
  if cmd == "up" then return cmd_up(argv, docker)
  elseif cmd == "down" then
    if not argv[2] then return fail("down needs a PROJECT") end
    local ok, err = docker.down(argv[2])
    if not ok then return fail(err) end
    out:write("removed ", argv[2], "\n")
    return 0
  elseif cmd == "ls" then return cmd_ls(docker)
  elseif cmd == "status" then return cmd_status(argv, docker)
  elseif cmd == "reap" then return cmd_reap(argv, docker)
  elseif cmd == "pool" then return cmd_pool(argv, docker)
  elseif cmd == "images" then return cmd_images(argv, docker)
  elseif cmd == "conform" then return cmd_conform(argv)
  elseif cmd == "gateway" then return cmd_gateway(argv)
  elseif require("sandstack.cli_lifecycle").HELP[cmd] then
    return require("sandstack.cli_lifecycle").run(cmd, argv, out, errout, docker)
  elseif cmd == "-h" or cmd == "--help" or cmd == "help" then
    out:write(USAGE, "\n")
    return 0
  end
  errout:write(USAGE, "\n")
  return 2
end

return M
