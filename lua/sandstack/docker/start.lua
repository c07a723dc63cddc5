-- The start pipeline of sandstack.docker (internal; sandstack.docker.start and the warm pools
-- call it). The model (core.stack_model) validates the options once, compiles the egress policy
-- and mints the token and the run label; every body comes finished from its plan, every answer
-- comes settled from C, and this file only orders the steps and calls the hooks.
local core = require "sandstack.core"
local E = require "sandstack.error"
local A = require "sandstack.docker.apply"
local isolation = require "sandstack.docker.isolation"
local handle = require "sandstack.docker.handle"
local control = require "sandstack.docker.control"
local init = require "sandstack.docker.deadline"
local steps = require "sandstack.stack.steps"

local M = {}

-- The stack options were checked by the model: the client is made from them without a second
-- options check.
local function engine(opts)
  return require("sandstack.engine").connect { host = opts.docker_host, timeout = opts.timeout, api_version = opts.api_version }
end

local function split_hooks(session_key, opts)
  return steps.split("sandstack.docker.start", session_key, opts, nil)
end

-- pool (a warm pool's name, or nil) labels every object io.sandstack.pool.
local function start_with(session_key, clean, hooks, pool)
  local model, err = core.stack_model(clean, session_key)
  if not model then return nil, err end
  -- a host limit one more session would meet refuses here, before any Engine call
  local fits; fits, err = require("sandstack.docker.host_limits").check_start(clean.docker_host)
  if not fits then model:close(); return nil, err end
  local eng; eng, err = engine(clean)
  if not eng then model:close(); return nil, err end
  -- the clock is read for on_event's `elapsed` only
  local run = { eng = eng, model = model, pool = pool, subnet_pool = clean.subnet_pool, t0 = hooks.on_event and A.now(),
    on_event = hooks.on_event, req_adapter = hooks.req_adapter, created = { networks = {}, volumes = {}, containers = {} } }
  local plan; plan, err = A.plan(run)
  if not plan then model:close(); eng:close(); return nil, err end
  -- the added proxy's control directory, when this process can make one the engine mounts
  -- (docker/control.lua), and the plan again, which mounts it into that proxy alone
  local project = plan.project
  if plan.proxy and plan.proxy.added then
    run.control_dir = control.prepare(eng, project)
    if run.control_dir then
      plan, err = A.plan(run)
      if not plan then control.remove(project); model:close(); eng:close(); return nil, err end
    end
    plan.proxy.control = run.control_dir and "socket" or "exec"
  end
  local stack = handle.new(eng, plan, hooks)
  local ok; ok, err = steps.run({
    function() return A.preflight(run) end, -- reads only: images, the self-check's identity, /info
    function() return require("sandstack.docker.runtime").check(eng, plan.runtime, run.info) end, -- before any pull or create
    function() return A.ensure_images(run) end,
    function() -- the sandbox under sandstack-init, whose plan needs the image's own command
      local control = plan.proxy and plan.proxy.control
      local p, e = init.prepare(run)
      if p then p, e = A.plan(run) end
      if not p then return nil, e end
      if p.proxy then p.proxy.control = control end
      handle.replan(stack, p)
      return true
    end,
    function() return isolation.verify(run) end,
    function() return A.create_networks_and_volumes(run) end,
    function() return A.create_containers(run) end, -- and the init's volume written
    function() return A.start_services(run, run.plan.containers) end,
    function()
      local port, e = A.read_port(run)
      handle.set_port(stack, port)
      return port, e
    end,
    function() return A.wait_ready(run, stack.port) end,
    function() -- a proxy that could not use the directory listens where the exec finds it
      if run.control_dir and not core.control_is_socket(control.socket(project)) then
        stack.plan.proxy.control = "exec"
      end
      return true
    end,
  }, function(e, raised)
    if not raised then A.emit(run, "failed", nil, { error = e }) end -- said before the rollback's time
    model:close()
    local left = A.rollback(run)
    if run.control_dir then control.remove(project) end
    handle.set_port(stack, nil)
    eng:close()
    return left
  end, project)
  if not ok then return nil, err end
  model:close()
  return stack
end

-- start(session_key, opts[, pool]) -> stack | nil, err
function M.start(session_key, opts, pool)
  local clean, hooks = split_hooks(session_key, opts)
  return start_with(session_key, clean, hooks, pool)
end

-- The plan a start would apply, without an engine (for inspection and tests): the same model and
-- the same bodies, except that a credential's secret is never shown (SANDSTACK_CREDENTIALS holds
-- a marker in its place). ctx: api_version (the engine's, default 1.41), pool, subnets = {sbx=, pub=,
-- egress=, isocheck=}, now/token/run to pin what a start takes from the clock and the CSPRNG, and
-- image, the sandbox image's Config {Entrypoint =, Cmd =} that a start reads from the engine for
-- sandstack-init's wrap (default: an image with neither).
local PLAN_CTX = { api_version = true, pool = true, subnets = true, now = true, token = true, run = true, image = true }
function M.plan(session_key, opts, ctx)
  local clean = split_hooks(session_key, opts)
  ctx = ctx or {}
  E.check_keys(ctx, PLAN_CTX, "sandstack.docker.plan")
  local model, err = core.stack_model(clean, session_key, { now = ctx.now, token = ctx.token, run = ctx.run })
  if not model then return nil, err end
  -- shown, never applied: each credential's secret is left out of the proxy's environment
  local plan; plan, err = model:plan { api_version = ctx.api_version, pool = ctx.pool, subnets = ctx.subnets,
    redact = true, init = { image = ctx.image } }
  model:close()
  return plan, err
end

return M
