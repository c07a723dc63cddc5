-- sandstack.docker.view: a handle on a stack this process did not start, made from its
-- containers as the engine lists them, for the CLI's exec, cp, logs and stats. Its own module:
-- it needs the handle's methods (docker/handle.lua), and docker/target.lua, which the handle's
-- parts use, must not require the handle.
local ops = require "sandstack.engine.ops"
local E = require "sandstack.error"

local M = {}

-- A handle for the session methods only (exec, files, logs, stats), from a project's
-- containers as the engine lists them. -> handle | nil, err. (The handle's module loads on the
-- first view, not with the CLI's command modules.)
function M.view(eng, project)
  local list, err = ops.call(eng, "list_containers", nil, { label = "io.sandstack.project=" .. project })
  if not list then return nil, err end
  local cs, sandbox = {}, nil
  for _, c in ipairs(list) do
    local l = c.Labels or {}
    local svc = l["io.sandstack.service"]
    if svc then
      cs[#cs + 1] = { service = svc, name = project .. "-" .. svc }
      if l["io.sandstack.role"] == "sandbox" then sandbox = svc end
    end
  end
  if #cs == 0 then return E.fail("engine", "not_found", "stack " .. project .. " has no containers", { project = project }) end
  table.sort(cs, function(a, b) return a.service < b.service end)
  local plan = { project = project, containers = cs, sandbox = sandbox or "sandbox" }
  local Stack = require("sandstack.docker.handle").Stack
  return setmetatable({ eng = eng, plan = plan, project = project }, { __index = Stack })
end

-- For the CLI commands: the session handle of the stack NAME (a session key or a project), or
-- nil and the exit code after ctx's error line. The caller closes h.eng.
function M.cli_handle(ctx, name)
  local s, code = ctx:stack(name)
  if not s then return nil, code end
  local eng, err = require("sandstack").engine {}
  if not eng then return nil, ctx:fail(err) end
  local h
  h, err = M.view(eng, s.project)
  if not h then eng:close(); return nil, ctx:fail(err) end
  return h
end

return M
