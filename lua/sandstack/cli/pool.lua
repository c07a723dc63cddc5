-- sandstack pool fill|drain|status: warm pools of ready stacks (docs/docker.md, "Warm pools").
local kit = require "sandstack.cli_kit"

local function counts(docker, name)
  local list, err = docker.list { pool = name }
  if not list then return nil, err end
  local st = { ready = 0, starting = 0, in_use = 0, failed = 0 }
  for _, s in ipairs(list) do st[s.state] = (st[s.state] or 0) + 1 end
  return st
end

local function whole(v, lo, hi)
  local n = tonumber(v)
  if n and n == math.floor(n) and n >= lo and (not hi or n <= hi) then return n end
end

local function fill(ctx, args, opt)
  local file = args[2]
  if not file then return ctx:usage("pool fill needs a FILE.lua") end
  if args[3] then return ctx:usage("pool fill takes one FILE.lua, got also " .. args[3]) end
  local size, width
  if opt.size then
    size = whole(opt.size, 0)
    if not size then return ctx:usage(("--size must be a whole number >= 0, got %q"):format(opt.size)) end
  end
  if opt.concurrency then
    width = whole(opt.concurrency, 1, 16)
    if not width then return ctx:usage(("--concurrency must be a whole number from 1 to 16, got %q"):format(opt.concurrency)) end
  end
  local opts, err = ctx:load(file, "the pool options ({ name =, size =, stack = {...} })")
  if not opts then return ctx:fail(err) end
  if opts.stack == nil and (opts.services or opts.image or opts.agent_port) then
    return ctx:fail("invalid", file .. " returns a stack's options, not a pool's: pool fill wants"
      .. " { name = \"NAME\", size = N, stack = { ...the stack's options... } }")
  end
  if size then
    opts.size = size
    if opts.max and opts.max < size then opts.max = size end
  end
  local docker = ctx:docker()
  local pool; pool, err = docker.pool(opts)
  if not pool then return ctx:fail(err) end
  local n; n, err = pool:fill { concurrency = width }
  local st = n and pool:status() or {}
  -- the engine client only: pool:close() would remove the idle stacks this command just made
  if pool.eng then pool.eng:close(); pool.eng = nil end
  if not n then return ctx:fail(err) end
  if opt.json then
    return ctx:json { pool = opts.name, started = n, ready = st.ready, starting = st.starting, in_use = st.in_use,
      failed = st.failed }
  end
  ctx.out:write(("started %d\nready %s starting %s in_use %s failed %s\n"):format(n, tostring(st.ready),
    tostring(st.starting), tostring(st.in_use), tostring(st.failed)))
  return 0
end

local function drain(ctx, args, opt)
  local name = args[2]
  if not name then return ctx:usage("pool drain needs a pool NAME") end
  local removed, err = ctx:docker().reap { pool = name }
  if not removed then return ctx:fail(err) end
  if opt.json then return ctx:json { pool = name, removed = kit.array(removed) } end
  for _, p in ipairs(removed) do ctx.out:write("removed ", p, "\n") end
  if #removed == 0 then ctx.out:write("pool ", name, " has no stack that no session holds\n") end
  return 0
end

local function status(ctx, args, opt)
  local name = args[2]
  if not name then return ctx:usage("pool status needs a pool NAME") end
  local st, err = counts(ctx:docker(), name)
  if not st then return ctx:fail(err) end
  if opt.json then
    return ctx:json { pool = name, ready = st.ready, starting = st.starting, in_use = st.in_use, failed = st.failed }
  end
  ctx.out:write(("pool %s\nready %d starting %d in_use %d failed %d\n"):format(name, st.ready, st.starting, st.in_use,
    st.failed))
  return 0
end

local SUB = { fill = fill, drain = drain, status = status }

return {
  order = 60,
  summary = "warm pools: fill one from a file, drain one, or count its stacks",
  usage = "pool fill FILE.lua [--size N] [--concurrency C] [--json] | pool drain NAME [--json] | pool status NAME [--json]",
  help = [[pool fill FILE.lua   FILE returns the pool options ({ name =, size =, stack = {...} });
                     starts stacks (C at once, default 4) until N are ready
pool drain NAME      removes every stack of pool NAME that no session holds
pool status NAME     counts the pool's stacks: ready, starting, in_use, failed

  --size N           the number of ready stacks to reach (fill)
  --concurrency C    starts at once, 1-16 (fill)]],
  options = { size = "N", concurrency = "C" },
  json = true,
  run = function(ctx, args, opt)
    local sub = SUB[args[1] or ""]
    if not sub then
      return ctx:usage(args[1] and ("unknown pool subcommand %q: use fill, drain or status"):format(args[1])
        or "pool needs fill, drain or status")
    end
    if args[1] ~= "fill" and (opt.size or opt.concurrency) then
      return ctx:usage("--size and --concurrency are options of pool fill")
    end
    return sub(ctx, args, opt)
  end,
}
