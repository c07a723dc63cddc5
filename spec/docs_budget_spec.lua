-- The documentation says what is true now, in a size a reader can take in: README.md, the
-- front page, at most 12 KB; no page of docs/, nor SECURITY.md, over 35 KB, all of docs/ under
-- 200 KB (README.md and SECURITY.md are not counted in it), and no issue number in the docs or
-- in a comment of the code or the benches (the repository has no tracker for them; history is
-- CHANGELOG.md's).
local h = require "helpers"

-- docs/ holds the map of every module (docs/architecture.md, about 7 KB of its 210)
local README_MAX, PAGE_MAX, DOCS_MAX = 12 * 1024, 35 * 1024, 210 * 1024

local function list(cmd)
  local out = {}
  local p = assert(io.popen(cmd))
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

-- "issue 12", "(issue 12)", "issues 23 and 25", "issue #12": a line of text citing the tracker.
local function issue_refs(text)
  local hits, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local l = line:lower()
    if l:match("%f[%a]issues? #?%d") then hits[#hits + 1] = n .. ": " .. line:sub(1, 120) end
  end
  return hits
end

describe("the documentation", function()
  local pages = list("find docs -name '*.md' | sort")

  it("keeps every page under 35 KB and docs/ under 210 KB", function()
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

  it("cites no issue number, nor the code's comments", function()
    local files = { "README.md", "SECURITY.md" }
    for _, f in ipairs(pages) do files[#files + 1] = f end
    for _, f in ipairs(list("find design -name '*.md' | sort")) do files[#files + 1] = f end
    for _, f in ipairs(list("find csrc lua bench -type f \\( -name '*.c' -o -name '*.h' -o -name '*.lua' -o -name '*.py' -o -name '*.sh' \\) | sort")) do
      files[#files + 1] = f
    end
    local bad = {}
    for _, f in ipairs(files) do
      for _, hit in ipairs(issue_refs(assert(h.read_file(f)))) do bad[#bad + 1] = f .. ":" .. hit end
    end
    assert(#bad == 0, "issue numbers (history goes to CHANGELOG.md):\n" .. table.concat(bad, "\n"))
  end)

  it("finds an issue number where there is one", function()
    assert.equal(1, #issue_refs("a fix (issue 12) here"))
    assert.equal(1, #issue_refs("Issues 23 and 25"))
    assert.equal(0, #issue_refs("an issuer name, 12 issues"))
  end)
end)
