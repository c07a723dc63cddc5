-- The require graph of the `sandstack` Lua modules, read from their source without loading them
-- (spec/module_graph_spec.lua holds it free of cycles). A require is found by reading the source
-- as Lua tokens, so one in a comment or inside another string does not count and one inside a
-- function does: `require "m"`, `require 'm'`, `require [[m]]`, `require("m")` and
-- `pcall(require, "m")`. A name built at run time (`require(prefix .. part)`) cannot be read
-- this way and is not in the graph.
local M = {}

-- The end of the long bracket opening at `at` (`[[`, `[==[`...), and its closing text.
local function long_bracket(src, at)
  local eqs = src:match("^%[(=*)%[", at)
  if not eqs then return nil end
  local close = "]" .. eqs .. "]"
  local stop = src:find(close, at, true)
  return at + #eqs + 2, (stop or #src + 1) - 1, stop and stop + #close or #src + 1
end

-- The source as a list of tokens { kind = "name"|"string"|"punct", text = ... }, comments dropped.
local function tokens(src)
  local out, at, n = {}, 1, #src
  while at <= n do
    local c = src:sub(at, at)
    if c:match("%s") then
      at = at + 1
    elseif src:sub(at, at + 1) == "--" then
      local _, _, after = long_bracket(src, at + 2)
      if after then
        at = after
      else
        at = (src:find("\n", at, true) or n) + 1
      end
    elseif c == '"' or c == "'" then
      local i, buf = at + 1, {}
      while i <= n do
        local d = src:sub(i, i)
        if d == "\\" then
          buf[#buf + 1] = src:sub(i, i + 1)
          i = i + 2
        elseif d == c or d == "\n" then
          break
        else
          buf[#buf + 1] = d
          i = i + 1
        end
      end
      out[#out + 1] = { kind = "string", text = table.concat(buf) }
      at = i + 1
    elseif c == "[" and long_bracket(src, at) then
      local first, last, after = long_bracket(src, at)
      out[#out + 1] = { kind = "string", text = src:sub(first, last):gsub("^\n", "") }
      at = after
    elseif c:match("[%w_]") then
      local word = src:match("^[%w_]+", at)
      out[#out + 1] = { kind = "name", text = word }
      at = at + #word
    else
      out[#out + 1] = { kind = "punct", text = c }
      at = at + 1
    end
  end
  return out
end

local function is(tok, kind, text)
  return tok ~= nil and tok.kind == kind and (text == nil or tok.text == text)
end

-- The module names one source requires with a literal name, in order of first appearance.
function M.requires(src)
  local toks, found, seen = tokens(src), {}, {}
  local function add(name)
    if not seen[name] then
      seen[name] = true
      found[#found + 1] = name
    end
  end
  for i, tok in ipairs(toks) do
    local before = toks[i - 1]
    if is(tok, "name", "require") and not is(before, "punct", ".") and not is(before, "punct", ":") then
      local a, b, c = toks[i + 1], toks[i + 2], toks[i + 3]
      if is(a, "string") then
        add(a.text) -- require "m"
      elseif is(a, "punct", "(") and is(b, "string") and is(c, "punct", ")") then
        add(b.text) -- require("m")
      elseif is(before, "punct", "(") and is(toks[i - 2], "name") and toks[i - 2].text:match("^x?pcall$")
          and is(a, "punct", ",") and is(b, "string") then
        add(b.text) -- pcall(require, "m")
      end
    end
  end
  return found
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

-- Every `sandstack` module under the directory `lua` (lua/sandstack.lua, lua/sandstack/**.lua):
-- module name -> file. A name with both a.lua and a/init.lua maps to a.lua, as package.path's
-- order (?.lua before ?/init.lua) has require load it.
function M.modules(lua)
  local files = {}
  local p = assert(io.popen("find '" .. lua .. "/sandstack' '" .. lua .. "/sandstack.lua' -name '*.lua' 2>/dev/null"))
  for line in p:lines() do files[#files + 1] = line end
  p:close()
  table.sort(files)
  local by = {}
  for _, file in ipairs(files) do
    local rel = file:sub(#lua + 2):gsub("%.lua$", "")
    local init = rel:match("^(.*)/init$")
    local name = (init or rel):gsub("/", ".")
    if not init or not by[name] then by[name] = file end
  end
  return by
end

-- The graph: module name -> sorted list of the `sandstack` modules (with a file) it requires.
-- A required module with no file (sandstack.core, the C core) has no edges to follow.
function M.graph(lua)
  local files, graph = M.modules(lua), {}
  for name, file in pairs(files) do
    local deps = {}
    for _, dep in ipairs(M.requires(read(file))) do
      if files[dep] then deps[#deps + 1] = dep end
    end
    table.sort(deps)
    graph[name] = deps
  end
  return graph
end

-- Tarjan's strongly connected components, visiting names in sorted order so the result is stable.
local function components(graph)
  local names = require("helpers").sorted_keys(graph)
  local index, low, on, stack, out, next_index = {}, {}, {}, {}, {}, 0
  local function visit(v)
    next_index = next_index + 1
    index[v], low[v] = next_index, next_index
    stack[#stack + 1], on[v] = v, true
    for _, w in ipairs(graph[v] or {}) do
      if not index[w] then
        visit(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        comp[#comp + 1] = w
      until w == v
      table.sort(comp)
      out[#out + 1] = comp
    end
  end
  for _, v in ipairs(names) do
    if not index[v] then visit(v) end
  end
  return out
end

-- The shortest path from `from` to `to` inside `members`, as a list of names from `from` to `to`.
local function shortest(graph, members, from, to)
  local prev, queue, head = { [from] = false }, { from }, 1
  while queue[head] do
    local v = queue[head]
    head = head + 1
    if v == to then break end
    for _, w in ipairs(graph[v] or {}) do
      if members[w] and prev[w] == nil then
        prev[w] = v
        queue[#queue + 1] = w
      end
    end
  end
  local path, v = {}, to
  while v do
    table.insert(path, 1, v)
    v = prev[v]
  end
  return path
end

-- The cycles, each a list of names in require order (the last requires the first). Every require
-- that lies on some cycle is on at least one listed: for each such edge a -> b not yet shown, the
-- cycle a -> b -> (shortest way back) -> a.
function M.cycles(graph)
  local out = {}
  for _, comp in ipairs(components(graph)) do
    local members = {}
    for _, v in ipairs(comp) do members[v] = true end
    local shown = {}
    for _, a in ipairs(comp) do
      for _, b in ipairs(graph[a] or {}) do
        if members[b] and not shown[a .. ">" .. b] then
          local cycle = a == b and { a } or shortest(graph, members, b, a)
          if a ~= b then
            table.remove(cycle)
            table.insert(cycle, 1, a)
          end
          for i, v in ipairs(cycle) do shown[v .. ">" .. cycle[i % #cycle + 1]] = true end
          out[#out + 1] = cycle
        end
      end
    end
  end
  return out
end

function M.describe(cycle)
  return table.concat(cycle, " -> ") .. " -> " .. cycle[1]
end

return M
