-- sandstack-tree (csrc/tree) on the host, and what the C core plans around it
-- (csrc/stack/tree_helper.c, snapshot_image.c): no engine. The copy must keep what `cp -a` keeps
-- and follow no link; the comparison must report regular files by content, whatever their
-- names hold; both must refuse what they do not copy and stay within their budgets. The trees
-- are made in a temporary directory with the host's coreutils; owners need root.
local core = require "sandstack.core"
local h = require "helpers"

local BUILD = package.cpath:match("^([^;]*)/%?%.so")
local TREE = BUILD .. "/sandstack-tree"
local ROOT = h.must("id -u"):match("%d+") == "0"

-- Every entry with type, mode, owner, size, nanosecond time, link count and target, and the
-- checksum of each regular file: two trees with the same listing are the same tree.
local LIST = "{ find . -type d -printf 'd %P %m %U %G %T@\\n'; find . ! -type d -printf '%y %P %m %U %G %s %T@ %n %l\\n';"
  .. " find . -type f -exec md5sum {} +; } | LC_ALL=C sort"

local dir
before_each(function() dir = h.must("mktemp -d /tmp/sstest-tree.XXXXXX"):gsub("%s+$", "") end)
after_each(function() h.sh("rm -rf " .. h.q(dir)) end)

local function tree(...)
  local args = {}
  for i, a in ipairs { ... } do args[i] = h.q(a) end
  local out, _, code = h.sh(h.q(TREE) .. " " .. table.concat(args, " ") .. " 2>" .. h.q(dir .. "/stderr"))
  return code, out, h.read_file(dir .. "/stderr") or ""
end
local function listing(path) return h.must("cd " .. h.q(path) .. " && " .. LIST) end
local function sh(cmd) return h.must("cd " .. h.q(dir) .. " && " .. cmd) end

-- The comparison's answer: { "A name", ... } with the names decoded, and the last line.
local function decoded(out)
  local lines, last = {}, nil
  for line in out:gmatch("[^\n]+") do
    local k, hex = line:match("^([ACD]) (%x+)$")
    if k then lines[#lines + 1] = k .. " " .. hex:gsub("%x%x", function(b) return string.char(tonumber(b, 16)) end)
    else last = line end
  end
  table.sort(lines)
  return lines, last
end

describe("sandstack-tree copy", function()
  it("keeps owners, modes, set-id bits, times, hard and symbolic links, FIFOs, sockets and holes", function()
    if not ROOT then return pending("owners need root") end
    sh("mkdir -p a/sub/deep b && cd a && echo alpha > a.txt && echo deep > sub/deep/f.txt && ln sub/deep/f.txt hard.txt"
      .. " && ln -s a.txt rel && ln -s /etc/passwd abs && ln -s ../../.. sub/deep/up && ln -s nowhere dangling"
      .. " && mkfifo fifo && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")'"
      .. " && truncate -s 1G sparse && printf end >> sparse && head -c 1048576 /dev/zero > zeros"
      .. " && printf 'x' > \"$(printf 'new\\nline\\377')\" && chown 1234:5678 a.txt sub/deep/f.txt"
      .. " && chown -h 4321:8765 rel && chmod 0640 a.txt && chmod 6755 sub/deep/f.txt && chmod 0700 sub"
      .. " && touch -h -d '2001-02-03 04:05:06.123456789' a.txt rel fifo sub/deep sub .")
    local code, _, err = tree("copy", dir .. "/a", dir .. "/b")
    assert.equal(0, code, err)
    assert.equal(listing(dir .. "/a"), listing(dir .. "/b"))
    -- the holes are kept (1 GiB written out would be 2097152 blocks), and a block of zeros becomes one
    assert.is_true(tonumber(sh("stat -c %b b/sparse")) < 64)
    assert.is_true(tonumber(sh("stat -c %b b/zeros")) < 64)
    assert.equal("6755", sh("stat -c %a b/sub/deep/f.txt"):gsub("%s+", ""))
  end)

  it("makes links as links and never follows one out of the tree", function()
    sh("mkdir -p a/d b && ln -s /etc a/etc-link && ln -s ../.. a/d/up && ln -s /etc/passwd a/passwd")
    local code, _, err = tree("copy", dir .. "/a", dir .. "/b")
    assert.equal(0, code, err)
    assert.equal("/etc", sh("readlink b/etc-link"):gsub("%s+$", ""))
    assert.equal("l", sh("find b/etc-link -printf %y"))
    assert.equal("5", sh("find b | wc -l"):gsub("%s+", "")) -- b, etc-link, d, d/up, passwd: nothing of /etc
  end)

  it("refuses a device node, a tree too deep and (no-special) a FIFO, each naming the path", function()
    if not ROOT then return pending("mknod needs root") end
    sh("mkdir -p a/x b && mknod a/x/null-dev c 1 3")
    local code, _, err = tree("copy", dir .. "/a", dir .. "/b")
    assert.equal(3, code)
    assert.matches("^device_node .*: x/null%-dev\n$", err)
    sh("rm -rf a b && mkdir a b && cd a && for i in $(seq 1 257); do mkdir d && cd d; done")
    code, _, err = tree("copy", dir .. "/a", dir .. "/b")
    assert.equal(3, code)
    assert.matches("^too_deep ", err)
    sh("rm -rf a b && mkdir a b && mkfifo a/pipe")
    code, _, err = tree("copy", dir .. "/a", dir .. "/b", "no-special")
    assert.equal(3, code)
    assert.matches("^special_file .*gVisor.*: pipe\n$", err)
    code = tree("copy", dir .. "/a", dir .. "/b2")
    assert.equal(1, code) -- a missing destination is an error, never made
    assert.equal(2, (tree("copy", dir .. "/a")))
  end)
end)

describe("sandstack-tree diff", function()
  it("reports regular files added, changed (same size, other bytes) and deleted, whatever their names", function()
    sh("mkdir -p old/sub/gone-dir new/sub && echo same > old/same && echo same > new/same && echo aaaa > old/c"
      .. " && echo bbbb > new/c && echo x > old/sub/gone-dir/f && echo y > old/becomes-link && ln -s same new/becomes-link"
      .. " && printf 1 > \"new/$(printf 'n\\nl\\377')\" && mkdir new/sub/added && echo z > new/sub/added/g"
      .. " && mkdir old/dir-to-link && echo w > old/dir-to-link/h && ln -s sub new/dir-to-link")
    local code, out, err = tree("diff", dir .. "/old", dir .. "/new", "100000")
    assert.equal(0, code, err)
    local lines, last = decoded(out)
    assert.equal("end", last)
    assert.same({ "A n\nl\255", "A sub/added/g", "C c", "D becomes-link", "D dir-to-link/h", "D sub/gone-dir/f" }, lines)
  end)

  it("ends with truncated, exit 4, rather than pass its budget", function()
    sh("mkdir old new && cd new && for i in $(seq 1 50); do echo $i > file-$i; done")
    local code, out = tree("diff", dir .. "/old", dir .. "/new", "200")
    assert.equal(4, code)
    assert.is_true(#out <= 200, #out .. " bytes")
    assert.equal("truncated", select(2, decoded(out)))
  end)
end)

describe("the snapshot's requests and images, as the C core plans them", function()
  it("confines a copy helper and a diff helper, each with only its capabilities", function()
    local r = core.tree_helper_create("p-snapshot-copy-1", { mode = "copy", image = "sandstack/tree:x", from = "a",
      to = "b", runtime = "runsc", labels = { ["io.sandstack.project"] = "p" } })
    assert.same({ "POST", "/containers/create", "p-snapshot-copy-1" }, { r.method, r.path, r.query.name })
    local b = assert(core.json_decode(r.body_json))
    assert.same({ "/sandstack-tree" }, b.Entrypoint)
    assert.same({ "copy", "/from", "/to" }, b.Cmd)
    local hc = b.HostConfig
    assert.same({ "ALL" }, hc.CapDrop)
    assert.same({ "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID" }, hc.CapAdd)
    assert.same({ "no-new-privileges" }, hc.SecurityOpt)
    assert.same({ "none", "runsc", true, 64, 134217728 }, { hc.NetworkMode, hc.Runtime, hc.ReadonlyRootfs, hc.PidsLimit, hc.Memory })
    assert.same({ true, false }, { hc.Mounts[1].ReadOnly, hc.Mounts[2].ReadOnly })
    assert.same({ "a", "b" }, { hc.Mounts[1].Source, hc.Mounts[2].Source })
    local d = assert(core.json_decode(core.tree_helper_create("n", { mode = "diff", image = "i", old = "a", new = "b",
      max_bytes = 4096, no_special = true }).body_json))
    assert.same({ "diff", "/old", "/new", "4096" }, d.Cmd)
    assert.same({ "DAC_READ_SEARCH" }, d.HostConfig.CapAdd)
    assert.same({ true, true }, { d.HostConfig.Mounts[1].ReadOnly, d.HostConfig.Mounts[2].ReadOnly })
    assert.is_nil(d.HostConfig.Runtime)
    assert.same({ "copy", "/from", "/to", "no-special" }, assert(core.json_decode(core.tree_helper_create("n",
      { mode = "copy", image = "i", from = "a", to = "b", no_special = true }).body_json)).Cmd)
    for _, bad in ipairs { { mode = "cp", image = "i", from = "a", to = "b" }, { mode = "copy", from = "a", to = "b" },
      { mode = "copy", image = "i", from = "a" }, { mode = "diff", image = "i", old = "a", new = "b" } } do
      assert.is_false((pcall(core.tree_helper_create, "n", bad)))
    end
  end)

  -- The members of an uncompressed tar: { [name] = data }.
  local function members(tar)
    local out, at = {}, 1
    while at + 511 <= #tar do
      local head = tar:sub(at, at + 511)
      if head == string.rep("\0", 512) then break end
      local name = head:sub(1, 100):gsub("%z.*$", "")
      local size = tonumber(head:sub(125, 136):gsub("%z.*$", ""), 8)
      out[name] = tar:sub(at + 512, at + 511 + size)
      at = at + 512 + math.ceil(size / 512) * 512
    end
    return out
  end

  it("writes a snapshot's image config from the base image and the labels alone, with the committed layers", function()
    local committed = [[{"Architecture":"amd64","Os":"linux","Created":"2026-01-02T03:04:05Z",
      "RootFS":{"Type":"layers","Layers":["sha256:aa","sha256:bb"]},
      "Config":{"Env":["PATH=/bin","ANTHROPIC_API_KEY=sk-secret"],"Labels":{"io.sandstack.project":"parent"}},
      "ContainerConfig":{"Env":["ANTHROPIC_API_KEY=sk-secret"]}}]]
    local base = [[{"Config":{"Env":["PATH=/bin"],"Cmd":["/bin/sh"],"ExposedPorts":{"8080/tcp":{}},"Volumes":null,
      "Image":"sha256:parent","Labels":{"base":"label"}}}]]
    local archive = assert(core.snapshot_image_archive(committed, base, { ["io.sandstack.snapshot"] = "snap-1" },
      "sandstack-snapshot:snap-1"))
    local m = members(archive)
    assert.is_nil(archive:find("sk-secret", 1, true))
    assert.is_nil(archive:find("parent", 1, true))
    local manifest = assert(core.json_decode(m["manifest.json"]))
    assert.same({ { Config = "config.json", RepoTags = { "sandstack-snapshot:snap-1" }, Layers = { "0/layer.tar", "1/layer.tar" } } },
      manifest)
    assert.is_nil(m["0/layer.tar"]) -- no layer's data: the engine has them
    assert.matches('"ExposedPorts":{"8080/tcp":{}}', m["config.json"], nil, true) -- types kept as the engine wrote them
    local config = assert(core.json_decode(m["config.json"]))
    assert.same({ "PATH=/bin" }, config.config.Env)
    assert.same({ "/bin/sh" }, config.config.Cmd)
    assert.same({ ["io.sandstack.snapshot"] = "snap-1" }, config.config.Labels)
    assert.same({ type = "layers", diff_ids = { "sha256:aa", "sha256:bb" } }, config.rootfs)
    assert.same({ "amd64", "linux", "2026-01-02T03:04:05Z" }, { config.architecture, config.os, config.created })
    assert.is_nil(config.container_config)
    local none, err = core.snapshot_image_archive("{}", base, {}, "t:1")
    assert.is_nil(none)
    assert.equal("bad_answer", err.reason)
    assert.is_nil((core.snapshot_image_archive("not json", base, {}, "t:1")))
  end)

  it("builds the helper's image from core.so's program alone, the same bytes every time", function()
    local archive, tag = core.tree_image()
    assert.equal(archive, (core.tree_image()))
    assert.equal("sandstack/tree:" .. core.sha256_hex(core.tree_program()):sub(1, 16), tag)
    local m = members(archive)
    local layer = members(m["0/layer.tar"])
    assert.same({ "sandstack-tree" }, (function() local k = {} for n in pairs(layer) do k[#k + 1] = n end return k end)())
    assert.equal(core.tree_program(), layer["sandstack-tree"])
    local config = assert(core.json_decode(m["config.json"]))
    assert.same({ "/sandstack-tree" }, config.config.Entrypoint)
    assert.same({ "sha256:" .. core.sha256_hex(m["0/layer.tar"]) }, config.rootfs.diff_ids)
  end)
end)
