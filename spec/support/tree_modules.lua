-- busted's helper (.busted): the specs test this checkout, never an installed copy. bootstrap.sh
-- installs the build into /usr/local, which the default package.path and package.cpath (kept
-- after the checkout's entries) also search; a module the checkout lacks, removed or renamed, would
-- then load from there, stale, and a spec would pass on code the tree no longer has. This
-- searcher, right after package.preload's, loads `sandstack` and `sandstack.*` only from the
-- checkout's entries (relative ones, or under the working directory, which tap-runner makes the
-- checkout) and raises for one it does not find there.
local searchers = package.searchers or package.loaders -- LuaJIT: package.loaders
local cwd = (os.getenv("PWD") or ""):gsub("/+$", "")

local function tree_only(path)
  local kept = {}
  for entry in path:gmatch("[^;]+") do
    if entry:sub(1, 1) ~= "/" or (cwd ~= "" and entry:sub(1, #cwd + 1) == cwd .. "/") then
      kept[#kept + 1] = entry
    end
  end
  return table.concat(kept, ";")
end

table.insert(searchers, 2, function(name)
  if name ~= "sandstack" and not name:find("^sandstack%.") then return nil end
  local file = package.searchpath(name, tree_only(package.path))
  if file then
    return assert(loadfile(file)), file
  end
  file = package.searchpath(name, tree_only(package.cpath))
  if file then
    return assert(package.loadlib(file, "luaopen_" .. name:gsub("%.", "_"))), file
  end
  error(("module '%s' is not in this checkout (package.path %s; package.cpath %s): an installed"
    .. " copy is not loaded by the specs"):format(name, tree_only(package.path), tree_only(package.cpath)), 2)
end)
