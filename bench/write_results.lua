-- The shell benches' way to bench/results.lua: their printed output on stdin becomes
-- docs/results/NAME.md (proxy_bench_common.sh's bench_results_begin and bench_results_end).
--   lua5.4 bench/write_results.lua NAME TITLE < output
-- BENCH_COMMAND (the bench's command line), BENCH_LOAD_BEFORE (the load when it began) and
-- BENCH_ENGINE (what ran it, when not the Docker engine) and BENCH_SECTION come from the environment.
local dir = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = dir .. "/?.lua;" .. package.path
local results = require "results"

local name, title = arg[1], arg[2]
if not name or name == "" or name:find("[^%w_%-]") then
  io.stderr:write("usage: lua5.4 bench/write_results.lua NAME TITLE < output (NAME: letters, digits, - and _)\n")
  os.exit(2)
end
-- BENCH_SECTION: the run replaces that section of the page (results.lua), titled one level down.
local section = os.getenv("BENCH_SECTION")
if section == "" then section = nil end
local run = results.begin(name, { title = title and ((section and "## " or "# ") .. title) or nil, section = section,
  command = os.getenv("BENCH_COMMAND") or "unknown", load_before = os.getenv("BENCH_LOAD_BEFORE"),
  stdout = function() end })
io.write(io.stdin:read("*a"))
local path = run:finish { engine = os.getenv("BENCH_ENGINE") }
if path then io.stderr:write("written: ", path, "\n") end
