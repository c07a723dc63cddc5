-- sandstack.sbx: the Docker sbx backend (spec 001). See docs/sbx.md.
--   local backend = sandstack.sbx.backend{ sbx_path =, workspace_root =, name_prefix = }
--   local box, err = backend:acquire{ conversation =, key =, kind =, egress = "closed" }
--   box:exec({ "echo", "hi" }) -> { stdout =, stderr =, exit_code = }
--   backend:close()
-- This file is the public entry; the concepts live under sandstack/sbx/: cli (the CLI runner
-- and its error classifier), host (host checks and egress state), records (names and
-- records), box (the Box), create (acquire and create), dispose (disposal), egress (what the
-- host's egress state means for an allowlist), options (option values).
local E = require "sandstack.error"
local cli, records = require "sandstack.sbx.cli", require "sandstack.sbx.records"
local create, dispose = require "sandstack.sbx.create", require "sandstack.sbx.dispose"
local egress, options = require "sandstack.sbx.egress", require "sandstack.sbx.options"

local M = {}

local MiB = 1024 * 1024

M.defaults = {
  name_prefix = "sandstack-",
  storage_base = "/sandstack/work",
  exec_cleanup_timeout = 10,
  max_output_bytes = 8 * MiB,
  command_timeout = 60, -- every sbx call but create and the command itself
  create_timeout = 600,
  exec_timeout = 60, -- a command's own default timeout
  cpus = 2,
  memory = "2g",
}

local Backend = {}
Backend.__index = Backend

local acquire_keys = E.described {
  { "conversation", "string", type = "string", default = "required",
    refused = "not a name" },
  { "key", "string", type = "string", default = "required",
    refused = "not a name" },
  { "kind", "string", type = "string", default = "`\"default\"`",
    refused = "not a name" },
  { "image", "string", type = "string", default = "sbx's template",
    refused = "not a string (`sbx create --template`)" },
  { "image_id", "string", type = "string", default = "none",
    refused = "not a string; wins over `image`" },
  { "egress", "string", type = "string, `\"closed\"` or `\"allowlist\"`", default = "`\"closed\"`",
    refused = "anything else" },
  { "egress_allow", "table", type = "list of policy rules", default = "`{}`",
    refused = "a rule `sandstack.policy.compile` refuses" },
  { "work_dir", "string", type = "string, a guest path", default = "the backend's `storage_base`",
    refused = "its parent exists in the image" },
}

function Backend:acquire(opts)
  cli.live(self)
  E.want(opts, "table", "acquire", "argument 'opts'", "an options table")
  if opts == nil then E.raise("acquire: argument 'opts' must be an options table { conversation =, key = }, got nil") end
  return create.acquire(self, E.options(opts, acquire_keys, "acquire"))
end

-- dispose{conversation =, key =}: every kind of one key. dispose_scope(conversation): all of it.
function Backend:dispose(key)
  cli.live(self)
  if type(key) ~= "table" or type(key.conversation) ~= "string" or type(key.key) ~= "string" then
    E.raise("dispose: argument must be { conversation = <string>, key = <string> }")
  end
  return dispose.prefix(self, records.key_prefix(self, key.conversation, key.key))
end

function Backend:dispose_scope(conversation)
  cli.live(self)
  E.want(conversation, "string", "dispose_scope", "argument 'conversation'")
  if conversation == nil or conversation == "" then E.raise("dispose_scope: argument 'conversation' must be a non-empty string") end
  return dispose.prefix(self, records.scope_prefix(self, conversation))
end

-- Releases the backend's host resources (the records plane). Idempotent; afterwards every
-- method of the backend and of its boxes raises a "closed" error object. Sandboxes stay.
function Backend:close()
  if not self.closed then self.records:close() end
  self.closed = true
end

Backend.__close = Backend.close

local backend_keys = E.described {
  { "sbx_path", type = "string", default = "`$SANDSTACK_SBX_PATH`, else `sbx` on PATH",
    refused = "not a non-empty string" },
  { "workspace_root", type = "string, a path", default = "`$XDG_STATE_HOME/sandstack-sbx/workspaces` (never under /tmp)",
    refused = "not a non-empty string" },
  { "name_prefix", type = "string", default = "`\"sandstack-\"`",
    refused = "not a non-empty string; sbx names take letters, digits, `-`, `.`, `+`" },
  { "storage_base", type = "string, a guest path", default = "`\"/sandstack/work\"`",
    refused = "not an absolute guest path below a top-level directory (`invalid`, `option`)" },
  { "exec_cleanup_timeout", type = "seconds", default = "`10`",
    refused = "not above 0" },
  { "max_output_bytes", type = "bytes", default = "8 MiB",
    refused = "not a positive whole number" },
  { "command_timeout", type = "seconds", default = "`60`",
    refused = "not above 0: every sbx call but create and the command" },
  { "create_timeout", type = "seconds", default = "`600`",
    refused = "not above 0" },
  { "exec_timeout", type = "seconds", default = "`60`",
    refused = "not above 0: a command's default" },
  { "cpus", type = "whole number", default = "`2`",
    refused = "not a positive whole number" },
  { "memory", type = "string or count", default = "`\"2g\"`",
    refused = "not a positive count with an optional `k`, `m`, `g` or `t`" },
}

-- sbx.backend{...} -> backend, or nil, err: a bad option value is invalid/option naming it.
function M.backend(opts)
  opts = E.check_keys(opts, backend_keys, "sbx.backend")
  local valid, verr = options.backend(opts)
  if not valid then return nil, verr end
  if opts.storage_base ~= nil then
    local parent, perr = create.validate_work_dir(opts.storage_base)
    if not parent then
      perr.reason, perr.option = "invalid_option", "storage_base"
      perr.message = "sbx.backend: storage_base: " .. perr.message
      return nil, perr
    end
  end
  local self = setmetatable({}, Backend)
  for k, v in pairs(M.defaults) do self[k] = v end
  for k, v in pairs(opts) do self[k] = v end
  self.sbx_path = opts.sbx_path or os.getenv("SANDSTACK_SBX_PATH") or "sbx"
  self.workspace_root = opts.workspace_root or records.default_workspace_root()
  if not self.name_prefix:match("^[A-Za-z0-9][A-Za-z0-9.+-]*$") then
    return E.refuse("sbx.backend", "name_prefix", "may hold letters, digits, '-', '.' and '+' only")
  end
  local ok, err = records.mkdir_p(self.workspace_root)
  if not ok then return nil, err end
  self.records, err = records.open(self)
  if not self.records then return nil, err end
  return self
end

M.egress = egress
return M
