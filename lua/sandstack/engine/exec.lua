-- exec in a container (internal to sandstack.engine): one call into the C core
-- (csrc/lua/engine_exec.c) does it all: the argument and option checks, the Env list, exec
-- create, start (without a hijack, or hijacked on a connection of its own to write stdin; the
-- framed stream demultiplexed byte-exact under the budget), and the exit code, under one deadline
-- kept in C from the start. Here only the client's settings are passed.
local O = require "sandstack.engine.options"
local R = require "sandstack.engine.requests"

local EXEC_MAX_BYTES = O.DEFAULTS.DEFAULT_EXEC_MAX_BYTES

local M = {}

-- eng:exec(container, argv, {user =, env =, workdir =, max_bytes =, timeout =, stdin =})
--   -> {stdout =, stderr =, exit_code =} | nil, err
-- Not a tail call: the C side raises argument errors at this function's caller (level 2).
function M.exec(eng, container, argv, opts)
  R.check_open(eng)
  local r, err = eng._h:exec(container, argv, opts, eng.api_version, eng.timeout, eng.max_bytes, EXEC_MAX_BYTES,
    eng._cfg)
  return r, err
end

return { methods = M }
