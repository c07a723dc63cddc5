-- The images a stack uses by default, built on this machine with no registry:
--   sandstack/proxy:<version>  the sandstack-proxy binary (csrc/proxy) and the shared libraries
--                              it loads, a CA bundle for the upstream, nsswitch (files first, so
--                              ExtraHosts names resolve), user nobody
--   sandstack/socat:<version>  the host's socat and its libraries: the forwarder and the
--                              isolation probe (they run only socat)
-- Each is a minimal root assembled in a temporary directory and imported through the Engine API
-- (POST /images/create?fromSrc=-, what `docker import` sends). An image is imported again only
-- when what went into it changed: a hash of its files and recipe is kept in a label.
--   sandstack.docker.build_images{docker_host =, proxy_binary =, socat =, force =,
--                                 proxy_image =, forwarder_image = (other names:tags)}
--     -> { {image =, built = true|false, hash =}, ... } | nil, err
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

M.PROXY_IMAGE = "sandstack/proxy:" .. core.VERSION
M.FORWARDER_IMAGE = "sandstack/socat:" .. core.VERSION
M.HASH_LABEL = "io.sandstack.image.hash"

local PROXY_PATH = "/usr/local/bin/sandstack-proxy"
local CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Runs a shell command; its output, or nil and an io error naming what failed.
-- The shell prints the status: LuaJIT's popen close does not report it.
local function sh(cmd, what)
  local p = assert(io.popen("( " .. cmd .. "\n) 2>&1; echo \"__rc=$?\""))
  local all = p:read("*a")
  p:close()
  local out, code = all:match("^(.-)__rc=(%d+)\n?$")
  if code == "0" then return out end
  return nil, E.new("io", "image_build", ("%s failed (exit %s): %s"):format(what, tostring(code), (out or all):sub(1, 400)),
    { step = what })
end

-- os.execute's success: true in Lua 5.2+, 0 in LuaJIT (5.1)
local function succeeds(cmd)
  local r = os.execute(cmd)
  return r == true or r == 0
end

local function executable(path)
  return path ~= nil and succeeds("test -x " .. q(path) .. " && test -f " .. q(path))
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

-- The proxy binary: the one the caller names; in a build tree, the one CMake built beside the
-- loaded core.so (build/sandstack/core.so -> build/sandstack-proxy); installed by the rockspec,
-- the one beside the `sandstack` command, then on PATH.
function M.find_proxy_binary(given)
  if given then
    if executable(given) then return given end
    return nil, E.new("invalid", "not_found", "proxy_binary " .. given .. " is not an executable file", { path = given })
  end
  local tried = {}
  local so = package.searchpath("sandstack.core", package.cpath)
  if so then tried[#tried + 1] = dirname(dirname(so)) .. "/sandstack-proxy" end
  local self = arg and arg[0]
  if self and self:find("/", 1, true) then tried[#tried + 1] = dirname(self) .. "/sandstack-proxy" end
  for _, path in ipairs(tried) do
    if executable(path) then return path end
  end
  local found = (sh("command -v sandstack-proxy", "looking up sandstack-proxy") or ""):match("^(/%S+)")
  if executable(found) then return found end
  tried[#tried + 1] = "PATH"
  return nil, E.new("invalid", "not_found", "sandstack-proxy not found (looked in " .. table.concat(tried, ", ")
    .. "): build the sandstack-proxy target or install the rock", { tried = tried })
end

local function find_socat(given)
  local path = given or (sh("command -v socat", "looking up socat") or ""):match("^(/%S+)")
  if executable(path) then return path end
  return nil, E.new("invalid", "not_found", "socat not found on this machine (install it: apt-get install socat)",
    { path = given })
end

-- Copies FILE into ROOT at DEST (default: the same path), then every library ldd names for it.
local function copy_with_libs(root, file, dest)
  dest = dest or file
  local ok, err = sh(("mkdir -p %s && cp -L %s %s"):format(q(root .. dirname(dest)), q(file), q(root .. dest)), "copying " .. file)
  if not ok then return nil, err end
  local libs; libs, err = sh("ldd " .. q(file), "ldd " .. file)
  if not libs then return nil, err end
  for lib in libs:gmatch("(/[^%s]+)") do
    ok, err = sh(("test -e %s || { mkdir -p %s && cp -L %s %s; }"):format(q(root .. lib), q(root .. dirname(lib)),
      q(lib), q(root .. lib)), "copying " .. lib)
    if not ok then return nil, err end
  end
  return true
end

local ETC = {
  ["/etc/passwd"] = "root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n",
  ["/etc/group"] = "root:x:0:\nnogroup:x:65534:\n",
  -- files first: names given with `hosts`/`proxy_hosts` land in /etc/hosts, and glibc without
  -- this file asks DNS first and stops at its "no such name"
  ["/etc/nsswitch.conf"] = "hosts: files dns\n",
}

local function write(path, text)
  local f, e = io.open(path, "wb")
  if not f then return nil, E.new("io", "image_build", "cannot write " .. path .. ": " .. tostring(e)) end
  f:write(text)
  f:close()
  return true
end

-- The recipes: files to copy (source, destination) and the image's config.
local function recipes(opts)
  local proxy, err = M.find_proxy_binary(opts.proxy_binary)
  if not proxy then return nil, err end
  local socat; socat, err = find_socat(opts.socat)
  if not socat then return nil, err end
  local proxy_files = { { proxy, PROXY_PATH } }
  local proxy_changes = { 'ENTRYPOINT ["' .. PROXY_PATH .. '"]', "USER 65534:65534", "EXPOSE 3128/tcp",
    "ENV PATH=/usr/local/bin:/usr/bin:/bin",
    -- the control socket (docs/proxy.md, "Policy changed live"): in the abstract namespace of the
    -- container's own network namespace (no file in its filesystem), on no port and no volume;
    -- an exec of `--control` joins that namespace and finds it by this variable too
    "ENV SANDSTACK_CONTROL_SOCKET=@sandstack-control" }
  if succeeds("test -f " .. CA_BUNDLE) then
    proxy_files[#proxy_files + 1] = { CA_BUNDLE, CA_BUNDLE, plain = true }
    -- OpenSSL's default roots file (/usr/lib/ssl/cert.pem) is not in this root: the proxy's
    -- upstream verification and the bundle it publishes for inspection read this one instead
    proxy_changes[#proxy_changes + 1] = "ENV SSL_CERT_FILE=" .. CA_BUNDLE
  end
  return {
    { image = opts.proxy_image or M.PROXY_IMAGE, files = proxy_files, source = proxy, changes = proxy_changes },
    { image = opts.forwarder_image or M.FORWARDER_IMAGE, files = { { socat, "/usr/bin/socat" } }, source = socat,
      changes = { 'ENTRYPOINT ["/usr/bin/socat"]', "ENV PATH=/usr/local/bin:/usr/bin:/bin" } },
  }
end

local function assemble(root, recipe)
  local ok, err = sh(("mkdir -p %s/etc %s/tmp %s/proc %s/sys %s/dev && chmod 1777 %s/tmp"):format(
    q(root), q(root), q(root), q(root), q(root), q(root)), "making the root")
  if not ok then return nil, err end
  for path, text in pairs(ETC) do
    ok, err = write(root .. path, text)
    if not ok then return nil, err end
  end
  for _, f in ipairs(recipe.files) do
    if f.plain then ok, err = sh(("mkdir -p %s && cp -L %s %s"):format(q(root .. dirname(f[2])), q(f[1]), q(root .. f[2])), "copying " .. f[1])
    else ok, err = copy_with_libs(root, f[1], f[2]) end
    if not ok then return nil, err end
  end
  return true
end

-- What went into the image: every file of the root (names and contents) and the config.
local function root_hash(root, recipe)
  local sums, err = sh(("cd %s && find . -type f | LC_ALL=C sort | xargs -d '\\n' sha256sum"):format(q(root)), "hashing the root")
  if not sums then return nil, err end
  local tmp = os.tmpname()
  local ok; ok, err = write(tmp, sums .. table.concat(recipe.changes, "\n"))
  if not ok then return nil, err end
  local out; out, err = sh("sha256sum " .. q(tmp), "hashing the root")
  os.remove(tmp)
  if not out then return nil, err end
  return out:sub(1, 16)
end

-- The hash label and id of the image now under that name (nil, nil when there is none).
local function current(eng, image)
  local method, path = ops.target("inspect_image", image)
  local info = eng:call(method, path)
  if type(info) ~= "table" then return nil, nil end
  local labels = info.Config and info.Config.Labels
  return type(labels) == "table" and labels[M.HASH_LABEL] or nil, info.Id
end

local function import(eng, root, recipe, hash)
  local tarball = os.tmpname()
  local ok, err = sh(("tar -C %s --numeric-owner --owner=0 --group=0 -cf %s ."):format(q(root), q(tarball)), "tar of the root")
  if not ok then os.remove(tarball); return nil, err end
  local f = assert(io.open(tarball, "rb"))
  local body = f:read("*a")
  f:close()
  os.remove(tarball)
  local repo, tag = recipe.image:match("^(.+):([^:/]+)$")
  local changes = {}
  for i, c in ipairs(recipe.changes) do changes[i] = c end
  changes[#changes + 1] = "LABEL " .. M.HASH_LABEL .. "=" .. hash
  local method, path = ops.target("import_image", nil, { repo = repo, tag = tag, changes = changes })
  local status, answer = eng:request(method, path, body, { content_type = "application/x-tar", timeout = 300, raw = true })
  if not status then return nil, answer end
  local text = type(answer) == "string" and answer or ""
  local streamed = text:match('"error"%s*:%s*"([^"]*)"')
  if status ~= 200 or streamed then
    return nil, E.new("engine", "image_import", ("importing %s failed (HTTP %s): %s"):format(recipe.image,
      tostring(status), streamed or text:sub(1, 300)), { image = recipe.image, status = status })
  end
  return true
end

local BUILD_KEYS = E.described {
  { "docker_host", "string", type = "string", default = "the default",
    refused = "not a string" },
  { "engine", "table", type = "table, an engine client", default = "a new one",
    refused = "—" },
  { "proxy_binary", "string", type = "string, a path", default = "the installed `sandstack-proxy`",
    refused = "—" },
  { "socat", "string", type = "string, a path", default = "`socat` on PATH",
    refused = "—" },
  { "force", "boolean", type = "boolean", default = "`false`",
    refused = "— rebuilds even when the image is current" },
  { "proxy_image", "string", type = "string `name:tag`", default = "`\"sandstack/proxy:<version>\"`",
    refused = "not `name:tag`" },
  { "forwarder_image", "string", type = "string `name:tag`", default = "`\"sandstack/socat:<version>\"`",
    refused = "not `name:tag`" },
}

function M.build(opts)
  local err
  opts = E.options(opts, BUILD_KEYS, "sandstack.docker.build_images")
  for _, key in ipairs { "proxy_image", "forwarder_image" } do
    if opts[key] and not opts[key]:match("^[%w][%w._/-]*:[%w][%w._-]*$") then
      return E.refuse("sandstack.docker.build_images", key, "must be name:tag, like \"sandstack/proxy:local\"")
    end
  end
  local list; list, err = recipes(opts)
  if not list then return nil, err end
  local eng = opts.engine
  if not eng then
    eng, err = require("sandstack").engine { host = opts.docker_host }
    if not eng then return nil, err end
  end
  local results = {}
  for _, recipe in ipairs(list) do
    local root; root, err = sh("mktemp -d /tmp/sandstack-image.XXXXXX", "mktemp")
    if not root then break end
    root = root:gsub("%s+$", "")
    local ok; ok, err = assemble(root, recipe)
    local hash
    if ok then hash, err = root_hash(root, recipe) end
    if hash then
      local built = false
      local had, old_id = current(eng, recipe.image)
      if opts.force or had ~= hash then
        ok, err = import(eng, root, recipe, hash)
        built = ok and true or false
        -- the image it replaced, now nameless; one a container still uses stays (409)
        if ok and old_id then eng:request(ops.target("remove_image", old_id)) end
      end
      if ok then results[#results + 1] = { image = recipe.image, built = built, hash = hash, source = recipe.source } end
    end
    sh("rm -rf " .. q(root), "removing " .. root)
    if err then break end
  end
  if not opts.engine then eng:close() end
  if err then return nil, err end
  return results
end

return M
