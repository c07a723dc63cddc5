-- The documentation says what is true now, in a size a reader can take in: README.md, the
-- front page, at most 12 KB; no page of docs/, nor SECURITY.md, over 35 KB, all of docs/ under
-- 220 KB (README.md and SECURITY.md are not counted in it), and no issue number in the docs,
-- the code, the specs and their support, the benches, the scripts or the examples (a reader of
-- the code has no tracker to look them up in; history is CHANGELOG.md's).
local h = require "helpers"

-- docs/ holds the map of every module (docs/architecture.md, about 7 KB of its 220), the options
-- tables written from the validators and the benches' results pages (scale.md among them)
local README_MAX, PAGE_MAX, DOCS_MAX = 12 * 1024, 35 * 1024, 220 * 1024

local function list(cmd)
  local out = {}
  local p = assert(io.popen(cmd))
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

-- A line citing the tracker: "issue" or "issues", perhaps a "#", then a number; or a number
-- after "#" alone in parentheses. skip(line) says a line is not to be read (the detector's own
-- test data below).
local function issue_refs(text, skip)
  local hits, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local l = line:lower()
    if (l:match("%f[%a]issues? #?%d") or l:match("%(#%d+%)")) and not (skip and skip(line)) then
      hits[#hits + 1] = n .. ": " .. line:sub(1, 120)
    end
  end
  return hits
end

-- Every text file a reader of the code may open: the Lua and C sources, the specs and their
-- support, the benches, the scripts, the examples and CI's script. Left out: the fuzzers'
-- corpora (inputs, not text), the lane timings spec/support/test-times.txt (measurements keyed
-- by file), files with a NUL byte, and Python's caches.
local CODE_DIRS = "lua csrc spec bench scripts examples .ci"
local CODE_FIND = "find " .. CODE_DIRS .. " -type f -not -path 'csrc/fuzz/corpus/*'"
  .. " -not -path '*/__pycache__/*' -not -path 'spec/support/fuzz-corpus-work/*'"
  .. " -not -path 'spec/support/test-times.txt' 2>/dev/null | sort"

-- this file's calls of the detector on a literal are its test data, not citations
local SELF = "spec/docs_budget_spec.lua"
local function detector_test_data(line) return line:find('issue_refs("', 1, true) ~= nil end

-- "file:line: text" for every citation in files
local function cited(files)
  local bad = {}
  for _, f in ipairs(files) do
    local text = assert(h.read_file(f))
    if not text:find("\0", 1, true) then
      for _, hit in ipairs(issue_refs(text, f == SELF and detector_test_data or nil)) do
        bad[#bad + 1] = f .. ":" .. hit
      end
    end
  end
  return bad
end

describe("the documentation", function()
  local pages = list("find docs -name '*.md' | sort")

  it("keeps every page under 35 KB and docs/ under 220 KB", function()
    local total, over = 0, {}
    for _, f in ipairs(pages) do
      local size = #assert(h.read_file(f))
      total = total + size
      if size > PAGE_MAX then over[#over + 1] = ("%s is %d bytes"):format(f, size) end
    end
    assert(#over == 0, "pages over 35 KB: " .. table.concat(over, "; "))
    assert(total < DOCS_MAX, ("docs/ is %d bytes, the budget %d"):format(total, DOCS_MAX))
  end)

  -- the README is the front page: what sandstack is, the two commands, the first script and a
  -- map of docs/; reference goes to the docs/ page a reader would look in
  it("keeps README.md at most 12 KB", function()
    local size = #assert(h.read_file("README.md"))
    assert(size <= README_MAX, ("README.md is %d bytes, the front page's limit %d: move reference into docs/"):format(size, README_MAX))
  end)

  -- SECURITY.md is reference too (the model and its attack table); its history and depth are
  -- design/security-reviews.md's and CHANGELOG.md's
  it("keeps SECURITY.md under 35 KB", function()
    local size = #assert(h.read_file("SECURITY.md"))
    assert(size <= PAGE_MAX, ("SECURITY.md is %d bytes, the page limit %d: move depth into design/"):format(size, PAGE_MAX))
  end)

  it("cites no issue number", function()
    local files = { "README.md", "SECURITY.md" }
    for _, f in ipairs(pages) do files[#files + 1] = f end
    for _, f in ipairs(list("find design -name '*.md' | sort")) do files[#files + 1] = f end
    local bad = cited(files)
    assert(#bad == 0, "issue numbers (history goes to CHANGELOG.md):\n" .. table.concat(bad, "\n"))
  end)
end)

describe("the code, the specs, the benches, the scripts and the examples", function()
  local files = list(CODE_FIND)

  it("are all read, the specs' support and extensionless scripts among them", function()
    local seen = {}
    for _, f in ipairs(files) do seen[f] = true end
    local expected = { "lua/sandstack/init.lua", "csrc/init/main.c", SELF, "spec/support/sbx-sim",
      "spec/support/bootstrap.sh", "spec/support/rmtree_race.py", "scripts/vendor-console.sh",
      "examples/demo.sh", ".ci/run" }
    for _, f in ipairs(expected) do
      assert(seen[f], f .. " is not among the files read")
    end
    assert.is_nil(seen["spec/support/test-times.txt"])
  end)

  it("cite no issue number, naming file:line for each", function()
    local bad = cited(files)
    assert(#bad == 0, "issue numbers (history goes to CHANGELOG.md):\n" .. table.concat(bad, "\n"))
  end)
end)

describe("the issue-number detector", function()
  it("finds an issue number where there is one", function()
    assert.equal(1, #issue_refs("a fix (issue 12) here"))
    assert.equal(1, #issue_refs("Issues 23 and 25"))
    assert.equal(1, #issue_refs("see issue #12"))
    assert.equal(1, #issue_refs("the daemon states (#28)"))
    assert.equal(0, #issue_refs("an issuer name, 12 issues"))
    assert.equal(0, #issue_refs("local n = #t + 1 -- (#t) items"))
  end)

  it("names the line of each, and passes over lines it is told to skip", function()
    assert.same({ "2: -- Issue 23: a comment" }, issue_refs("ok\n-- Issue 23: a comment\nok"))
    assert.same({}, issue_refs("-- Issue 23: a comment", function() return true end))
  end)
end)
