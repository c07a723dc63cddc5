-- bench/results.lua, the benches' writer of docs/results/: a run replaces its own page (or its
-- own marked section of a shared page, leaving the rest as it was) with the date, the machine,
-- the load before and after, the engine, the commit, the command line and what it printed; a run
-- that never finishes writes nothing. The shell benches reach it through bench/write_results.lua
-- and proxy_bench_common.sh. No engine: every page goes to a temporary directory.
package.path = "./bench/?.lua;" .. package.path
local results = require "results"
local h = require "helpers"

local FACTS = { engine = "Docker 20.10.24 (API 1.41)", commit = "abc1234", machine = "2 CPUs, 7.8 GiB",
  load_after = "2.00 1.50 1.00" }

describe("bench/results.lua", function()
  local dir
  before_each(function() dir = h.must("mktemp -d /tmp/bench-results-spec.XXXXXX"):match("[^\n]+") end)
  after_each(function() h.must("rm -rf " .. h.q(dir)) end)

  -- one run: prints through print and io.write, kept and echoed through `echoed`
  local function run(name, opts, lines)
    local echoed = {}
    opts.dir, opts.stdout = dir, function(s) echoed[#echoed + 1] = s end
    opts.load_before = opts.load_before or "0.50 0.40 0.30"
    local r = results.begin(name, opts)
    for _, l in ipairs(lines) do
      if l:sub(1, 1) == ">" then io.write(l:sub(2), "\n") else print(l) end
    end
    local path = r:finish(FACTS)
    return path, table.concat(echoed)
  end

  it("writes a page with the run's facts and what it printed, and the next run replaces it", function()
    local path, echoed = run("crossings", { title = "# Results: crossings", command = "lua5.4 bench/crossings_bench.lua 5" },
      { "| step | calls |", ">| start | 3 |" })
    assert.equal(dir .. "/crossings.md", path)
    assert.equal("| step | calls |\n| start | 3 |\n", echoed) -- still printed as it ran
    local page = h.read_file(path)
    assert.matches("^# Results: crossings\n", page)
    for _, want in ipairs({ "`lua5.4 bench/crossings_bench.lua 5`", "commit abc1234", "2 CPUs, 7.8 GiB",
      "Docker 20.10.24 %(API 1.41%)", "load average 0.50 0.40 0.30 before, 2.00 1.50 1.00 after",
      (os.date("!%Y-%m-%d"):gsub("%-", "%%-")), "```\n| step | calls |\n| start | 3 |\n```" }) do
      assert.matches(want, page)
    end
    run("crossings", { title = "# Results: crossings", command = "c" }, { "second run" })
    page = h.read_file(path)
    assert.matches("second run", page)
    assert.not_matches("start | 3", page) -- replaced, not appended: the page stays one run long
  end)

  it("writes markdown output as it is, unfenced", function()
    local path = run("lifecycle", { markdown = true, command = "c" }, { "| a | b |", "|---|---|" })
    assert.matches("after%.\n\n| a | b |\n|%-%-%-|%-%-%-|\n$", h.read_file(path))
  end)

  it("replaces only its own marked section of a shared page, and adds the section when missing", function()
    local path = dir .. "/docker.md"
    h.write_file(path, "# Results\n\n## Benchmark\n\nprose before\n\n<!-- results: stack_bench -->\nold numbers 11.79 s\n"
      .. "<!-- /results: stack_bench -->\n\nprose after\n\n## Scale\n\nscale numbers\n")
    run("docker", { section = "stack_bench", command = "c" }, { "new numbers 9.00 s" })
    local page = h.read_file(path)
    assert.not_matches("11%.79", page)
    assert.matches("prose before\n\n<!%-%- results: stack_bench %-%->\nWritten by `c`.-new numbers 9%.00 s\n```\n"
      .. "<!%-%- /results: stack_bench %-%->\n\nprose after\n\n## Scale\n\nscale numbers\n$", page)
    run("docker", { section = "fresh", command = "c" }, { "fresh numbers" })
    run("docker", { section = "fresh", command = "c" }, { "fresh again" })
    page = h.read_file(path)
    assert.matches("new numbers 9%.00 s", page) -- the other section is untouched
    assert.matches("scale numbers\n\n<!%-%- results: fresh %-%->\n.-fresh again\n```\n<!%-%- /results: fresh %-%->\n$", page)
    assert.not_matches("fresh numbers", page)
  end)

  it("writes nothing for a run that never finishes, and gives print and io.write back", function()
    local real_print, real_write = print, io.write
    local r = results.begin("broken", { dir = dir, stdout = function() end })
    print("half a table")
    assert.are_not.equal(real_print, print)
    r:finish(FACTS)
    assert.equal(real_print, print)
    assert.equal(real_write, io.write)
    results.begin("never", { dir = dir, stdout = function() end }) -- a bench that fails here...
    _G.print, io.write = real_print, real_write -- ...exits; the spec restores what it replaced
    assert.is_nil(h.read_file(dir .. "/never.md"))
  end)

  it("reads the machine and the load, and quotes the command line", function()
    assert.equal("1.52 1.10 0.98", results.loadavg("1.52 1.10 0.98 2/345 6789\n"))
    assert.equal("2 CPUs, 7.8 GiB", results.machine(2, "MemTotal:        8178340 kB\nMemFree: 1 kB\n"))
    assert.matches("^%d+ CPUs, %d+%.%d GiB$", results.machine())
    assert.equal("lua5.4 bench/x.lua 3 'a b'", results.command({ [-1] = "lua5.4", [0] = "bench/x.lua", "3", "a b" }))
    assert.matches("^%x+", results.commit())
  end)

  it("writes a shell bench's output through bench/write_results.lua", function()
    local out = h.must("printf 'proxy/direct 0.91\\n' | SANDSTACK_RESULTS_DIR=" .. h.q(dir)
      .. " BENCH_COMMAND='bash bench/proxy_bench.sh build 64' BENCH_LOAD_BEFORE='3.00 2.00 1.00'"
      .. " BENCH_ENGINE='no engine: network namespaces' lua5.4 bench/write_results.lua proxy 'Results: the proxy'")
    assert.matches("written: " .. dir:gsub("%p", "%%%0") .. "/proxy.md", out)
    local page = h.read_file(dir .. "/proxy.md")
    assert.matches("^# Results: the proxy\n", page)
    assert.matches("`bash bench/proxy_bench.sh build 64`", page)
    assert.matches("no engine: network namespaces; load average 3%.00 2%.00 1%.00 before", page)
    assert.matches("```\nproxy/direct 0%.91\n```", page)
    local _, ok = h.sh("lua5.4 bench/write_results.lua '../x' T </dev/null")
    assert.is_false(ok) -- a name that would leave the directory is refused
  end)

  it("keeps what a shell bench prints between bench_results_begin and bench_results_end", function()
    local out = h.must("cd bench/.. && SANDSTACK_RESULTS_DIR=" .. h.q(dir) .. " bash -c "
      .. h.q('set -euo pipefail; top=$PWD; . bench/proxy_bench_common.sh; echo before; bench_results_begin 64;'
        .. ' echo "rate 1234 req/s"; echo "goal met"; bench_results_end proxy-keepalive "Keep-alive"; echo after') .. " bench/proxy_keepalive_bench.sh")
    assert.matches("before\nrate 1234 req/s\ngoal met\n.*after", out) -- still printed as it ran
    local page = h.read_file(dir .. "/proxy-keepalive.md")
    assert.matches("```\nrate 1234 req/s\ngoal met\n```", page)
    assert.matches("`bash bench/proxy_keepalive_bench.sh 64`", page)
    assert.not_matches("\nbefore\n", page)
    assert.not_matches("\nafter\n", page)
  end)

  it("keeps only the lines a shell bench names, in the section BENCH_SECTION names", function()
    local script = 'set -euo pipefail; top=$PWD; . bench/proxy_bench_common.sh; bench_results_begin 64;'
      .. ' echo "CONNECT 3 runs"; echo "  run 1 0.9"; echo "  noise"; echo "  goal met";'
      .. ' BENCH_SECTION=connect bench_results_end proxy "CONNECT" "^(CONNECT|  run|  goal)"'
    h.must("cd bench/.. && SANDSTACK_RESULTS_DIR=" .. h.q(dir) .. " bash -c " .. h.q(script) .. " bench/proxy_bench.sh")
    h.must("cd bench/.. && SANDSTACK_RESULTS_DIR=" .. h.q(dir) .. " bash -c "
      .. h.q(script:gsub("connect", "keepalive"):gsub('"CONNECT"', '"Keep-alive"')) .. " bench/proxy_keepalive_bench.sh")
    local page = h.read_file(dir .. "/proxy.md")
    assert.matches("<!%-%- results: connect %-%->\n## CONNECT\n.-```\nCONNECT 3 runs\n  run 1 0%.9\n  goal met\n```", page)
    assert.matches("<!%-%- results: keepalive %-%->\n## Keep%-alive\n", page)
    assert.not_matches("noise", page)
  end)
end)
