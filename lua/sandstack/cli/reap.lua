-- sandstack reap: remove the stacks a filter selects; with no filter it asks for --all.
local kit = require "sandstack.cli_kit"

-- The stacks the filters select, from docker.list's answer.
local function select_stacks(stacks, f, now)
  local out = {}
  for _, s in ipairs(stacks) do
    local take = true
    if f.older_than then take = s.created ~= nil and now - s.created >= f.older_than end
    if take and f.name then take = s.project == f.name or s.session_key == f.name end
    if take and f.prefix then
      take = s.project:sub(1, #f.prefix) == f.prefix or (s.session_key or ""):sub(1, #f.prefix) == f.prefix
    end
    if take and f.pool then take = s.pool == f.pool and s.state ~= "in_use" end
    if take then out[#out + 1] = s end
  end
  return out
end

-- reap --expired: the expiry's pass (sandstack.docker.reap{expired = true}), narrowed by
-- --project, --prefix and --pool; what it did, one line a stack.
local function reap_expired(ctx, docker, opt)
  if opt["older-than"] or opt.all or opt["dry-run"] then
    return ctx:usage("--expired acts on what is due now and takes only --project, --prefix and --pool")
  end
  local project = opt.project
  if project then -- a session key names its project
    local stacks, err = docker.list {}
    if not stacks then return ctx:fail(err) end
    for _, s in ipairs(stacks) do if s.session_key == opt.project then project = s.project end end
  end
  local done, err = docker.reap { expired = true, project = project, prefix = opt.prefix, pool = opt.pool }
  if not done then
    if opt.json then ctx:json { expired = kit.array(err.done or {}), error = tostring(err) } end
    return ctx:fail(err)
  end
  if opt.json then return ctx:json { expired = kit.array(done) } end
  for _, d in ipairs(done) do
    ctx.out:write(d.action == "hibernate" and "hibernated " or "removed ", d.project, " (", d.reason, ")\n")
  end
  if #done == 0 then ctx.out:write("no stack is due\n") end
  return 0
end

return {
  order = 50,
  summary = "remove the stacks a filter selects (what crashed sessions left behind)",
  usage = "reap (--older-than AGE | --project NAME | --prefix P | --pool NAME | --all | --expired) [--dry-run] [--json]",
  help = [[Filters combine (a stack must match each one given). With no filter reap refuses and asks
for --all, which removes every stack sandstack owns on the engine.

  --older-than AGE  created at least AGE ago: 90s, 30m, 1h, 2d, or plain seconds
  --project NAME    the stack NAME (a project name or a session key)
  --prefix P        stacks whose project name or session key starts with P
  --pool NAME       that warm pool's stacks no session holds
  --all             every stack sandstack owns (needed when no filter is given)
  --expired         the stacks whose ttl or idle_timeout is due: destroyed, or hibernated by
                    their on_expiry (with --project, --prefix or --pool only)
  --dry-run         list what would be removed, remove nothing]],
  options = { ["older-than"] = "AGE", project = "NAME", prefix = "P", pool = "NAME", all = true, ["dry-run"] = true,
    expired = true },
  json = true,
  run = function(ctx, args, opt)
    if args[1] then return ctx:usage("reap takes no argument, got " .. args[1] .. " (use --project NAME)") end
    if opt.expired then return reap_expired(ctx, ctx:docker(), opt) end
    local f = { name = opt.project, prefix = opt.prefix, pool = opt.pool }
    if opt["older-than"] then
      f.older_than = kit.duration(opt["older-than"])
      if not f.older_than then
        return ctx:usage(("--older-than takes a duration like 90s, 30m, 1h, 2d or seconds, got %q"):format(opt["older-than"]))
      end
    end
    if not (f.older_than or f.name or f.prefix or f.pool or opt.all) then
      return ctx:usage("reap with no filter would remove every stack: give --older-than, --project, --prefix, --pool, or --all")
    end
    local docker = ctx:docker()
    local stacks, err = docker.list { pool = f.pool }
    if not stacks then return ctx:fail(err) end
    local chosen = select_stacks(stacks, f, os.time())
    local removed = {}
    if not opt["dry-run"] and not f.pool then
      -- one listing and the removals together, however many stacks were chosen
      local projects = {}
      for i, s in ipairs(chosen) do projects[i] = s.project end
      local gone; gone, err = require("sandstack.docker.reap_batch").remove(projects, { older_than = f.older_than })
      if not gone then
        if opt.json then ctx:json { removed = kit.array(err.removed or {}), error = tostring(err) } end
        return ctx:fail(err)
      end
      removed = gone
    elseif not opt["dry-run"] then
      for _, s in ipairs(chosen) do
        -- a pool's stacks one by one: each removal first claims the stack on the engine, so a
        -- session claiming it at that moment keeps it (and the age is checked again)
        local gone; gone, err = docker.reap { project = s.project, older_than = f.older_than, pool = s.pool and f.pool or nil }
        if not gone then
          if opt.json then ctx:json { removed = kit.array(removed), error = tostring(err) } end
          return ctx:fail(err)
        end
        for _, p in ipairs(gone) do removed[#removed + 1] = p end
      end
    else
      for _, s in ipairs(chosen) do removed[#removed + 1] = s.project end
    end
    if opt.json then
      return ctx:json { dry_run = opt["dry-run"] == true, [opt["dry-run"] and "would_remove" or "removed"] = kit.array(removed) }
    end
    local verb = opt["dry-run"] and "would remove " or "removed "
    for _, p in ipairs(removed) do ctx.out:write(verb, p, "\n") end
    if #removed == 0 then ctx.out:write("no stack matched\n") end
    return 0
  end,
}
