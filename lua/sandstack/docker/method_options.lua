-- The options of the docker handle's methods, each an options spec that is also its table in the
-- reference (sandstack.error's `described`; scripts/api_tables.lua writes docs/api from these):
-- the methods check their options against these very tables (handle.lua, handle_files.lua,
-- handle_observe.lua, handle_exec.lua, process.lua), so a table cannot say other than the check.
local E = require "sandstack.error"

local M = {}

-- a terminal's size, whole 1..65535
local SIZE = { "number", min = 1, max = 65535, whole = true, says = "a whole number from 1 to 65535",
  wanted = "a whole number" }
-- stats' window and every: finite (a window of math.huge would never end)
local SPAN = { "number", above = 0, max = 1e9, says = "a finite number of seconds above 0", wanted = "a number of seconds" }

-- h:exec's (handle_exec.lua; its defaults are handle_exec's DEFAULT_TIMEOUT and DEFAULT_MAX_BYTES)
local exec = E.described {
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service (`invalid`)" },
  { "env", "table", type = "table", default = "none",
    refused = "not a table of strings" },
  { { "cwd", "user" }, "string", type = "string", default = "the image's",
    refused = "empty" },
  { "timeout", { "number", above = 0, max = 1e9, says = "a number of seconds above 0, at most 1e9",
    wanted = "a number of seconds" }, type = "seconds", default = "60",
    refused = "not above 0, over 1e9; past it the processes are killed. Counted from the process running "
      .. "(sbx: from its exec's start)" },
  { "max_bytes", E.BYTES, type = "bytes", default = "8 MiB",
    refused = "not a positive whole number; past it the processes are killed" },
  { "stdin", "string", type = "string", default = "none",
    refused = "not a string (raises); sbx: `unsupported`. Written to the command's stdin while its output is "
      .. "read, then EOF (the same exec, its start hijacked)" },
}

local stop = E.described {
  { "timeout", E.SECONDS0, type = "whole seconds", default = "`5`",
    refused = "below 0: the engine's grace period before it kills" },
}
local destroy = E.described {
  { "capture", "string", type = "string, a directory", default = "none",
    refused = "with a `capture_path`, `stack:capture(capture)` runs first" },
}
local reconnect = E.described {
  { "docker_host", "string", type = "string", default = "the record's, else the default",
    refused = "not a string" },
  { "timeout", E.SECONDS, type = "seconds", default = "the record's, else 30",
    refused = "not above 0" },
  { "on_event", "function", type = "function", default = "none",
    refused = "not a function" },
  { "req_adapter", "function", type = "function", default = "built in",
    refused = "not a function" },
}
local spawn = E.described {
  { "tty", "boolean", type = "boolean", default = "false",
    refused = "not a boolean" },
  { { "cols", "rows" }, SIZE, type = "whole number", default = "80, 24 (with `tty`)",
    refused = "not in 1..65535" },
  { "env", "table", type = "table", default = "none",
    refused = "not a table of strings" },
  { { "cwd", "user", "service" }, "string", type = "string", default = "the image's, the sandbox",
    refused = "empty" },
  { "timeout", E.SECONDS, type = "seconds", default = "30",
    refused = "not above 0: each Engine request, a write, and `read`'s and `wait`'s default" },
  { "on_output", "function", type = "function(data, stream)", default = "none",
    refused = "not a function: output goes there instead of to `read`" },
  { "max_bytes", E.BYTES, type = "bytes", default = "16 MiB",
    refused = "output held unread past it: `output_limit`" },
}
local read = E.described {
  { "max_bytes", E.BYTES, type = "bytes", default = "64 MiB",
    refused = "not a positive whole number" },
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
}
local stat = E.described {
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
}
local download = E.described {
  { "max_bytes", E.BYTES, type = "bytes", default = "1 GiB (sbx: 64 MiB)",
    refused = "not a positive whole number" },
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
}
local remove = E.described {
  { "recursive", "boolean", type = "boolean", default = "false",
    refused = "a non-empty directory without it (`io`)" },
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
}
local logs = E.described {
  { "service", "string", type = "string", default = "the sandbox",
    refused = "names no service" },
  { "since", { "number", says = "a unix time in seconds" }, type = "seconds since the epoch", default = "the start",
    refused = "not a number" },
  { "tail", E.COUNT0, type = "whole number", default = "all",
    refused = "not a number" },
  { "follow", "boolean", type = "boolean", default = "false",
    refused = "" },
  { "max_bytes", E.BYTES, type = "bytes", default = "8 MiB",
    refused = "past it: `output_limit`" },
  { "timeout", E.SECONDS, type = "seconds", default = "the engine's",
    refused = "not above 0" },
}
local stats = E.described {
  { "timeout", E.SECONDS, type = "seconds", default = "the engine's",
    refused = "not above 0" },
  { "window", SPAN, type = "seconds", default = "none: one sample",
    refused = "not above 0; below `every`; over 3600 samples" },
  { "every", SPAN, type = "seconds", default = "`1`",
    refused = "not above 0; without `window`" },
}

M.exec, M.stop, M.start, M.destroy, M.reconnect, M.spawn = exec, stop, {}, destroy, reconnect, spawn
M.read, M.stat, M.download, M.remove, M.logs, M.stats = read, stat, download, remove, logs, stats

return M
