-- Snapshots through the production gateway have an owner and a quota. Attacked with a real
-- nginx and real stacks: a tenant that snapshots or forks past its count or byte quota is
-- refused (429 limit) while the other tenant still snapshots; DELETE removes the session's
-- snapshots (image and volume copies, counted by label on the engine) unless one was kept on
-- purpose, which stays the tenant's to list and delete; a fork's volume copies go once its child
-- has started and its image with the child; the expiry pass removes the snapshots of the
-- sessions it ends (idle, or the stack's own ttl) and sweeps orphans of this gateway.
-- #nginx #docker (lua54 only, as the other nginx specs).
if jit or os.getenv("SANDSTACK_TEST_MODE") == "asan" then return end
local core = require "sandstack.core"
local h = require "helpers"
local gh = require "gateway_harness"
local docker = require("sandstack").docker

local TOKENS = gh.TOKENS
local MiB = 1024 * 1024

-- A stack with a volume, so that each snapshot has a volume copy as well as an image.
local function stack()
  return gh.stack_options { volumes = { { name = "workspace" } },
    services = { { name = "sandbox", image = "sandstack-test/agent:local", command = { "agent" },
      env = { AGENT_PORT = "8080" }, volumes = { { name = "workspace", target = "/workspace" } } } } }
end

-- The snapshots on the engine whose source project starts with prefix: { [id] = {image =, volumes =} }
-- (docker.snapshots reads the labels of images and volumes).
local function snapshots(prefix)
  local out = {}
  for _, s in ipairs(assert(docker.snapshots())) do
    if (s.source or ""):sub(1, #prefix) == prefix then out[s.id] = { image = s.image, volumes = s.volumes } end
  end
  return out
end

local function count(t) local n = 0; for _ in pairs(t) do n = n + 1 end; return n end

-- waits until the prefix's snapshots are exactly `want` (ids); true, or false and what is left.
-- Removing an image takes over a minute on a loaded engine: the gateway's removal, or its
-- sweep's next pass, may end after the request that caused it answered.
local function settle(prefix, want, seconds)
  local left
  local ok = pcall(h.wait_for, "the snapshots", function()
    left = {}
    for id in pairs(snapshots(prefix)) do left[#left + 1] = id end
    table.sort(left)
    return table.concat(left, " ") == table.concat(want, " ")
  end, seconds or 180, 0.2)
  return ok, left
end

-- Removes what a failed run left: the stacks, then every snapshot of the prefix (images first
-- would fail while a child runs one, so the stacks go before).
local function cleanup(prefix)
  gh.cleanup(prefix)
  local ids = {}
  for id in pairs(snapshots(prefix)) do ids[#ids + 1] = id end
  if #ids > 0 then docker.remove_snapshot(ids) end
end

-- The guest writes n MiB into its workspace (as the agent could).
local function fill(node, tenant, key, mib)
  local c = require("sandstack.gateway").project_for(node.conf, tenant, key) .. "-sandbox"
  h.must(("docker exec %s dd if=/dev/zero of=/workspace/blob bs=1M count=%d 2>/dev/null"):format(h.q(c), mib))
end

describe("gateway snapshots: quota and owner #nginx #docker", function()
  local P = gh.PREFIX .. "sq-"
  local node

  setup(function()
    node = gh.start(gh.config { project_prefix = P, stack = stack(),
      snapshot_quota = { count = 2, bytes = 32 * MiB } })
    assert(node:wait_adopted(60), node:error_log())
  end)

  teardown(function()
    if node then node:stop() end
    cleanup(P)
  end)

  local function create(tenant, key)
    local st, doc, body = node:api("POST", "/sessions/" .. key, { token = TOKENS[tenant], timeout = 180 })
    assert.equal(201, st, tostring(body) .. node:error_log():sub(-3000))
    return doc
  end
  local function verb(tenant, key, secret, v, query)
    return node:api("POST", "/sessions/" .. key .. "/" .. v .. (query or ""),
      { token = TOKENS[tenant], secret = secret, timeout = 180 })
  end
  local function delete(tenant, key, secret)
    local st, _, body = node:api("DELETE", "/sessions/" .. key, { token = TOKENS[tenant], secret = secret, timeout = 180 })
    assert.equal(200, st, body)
  end

  it("refuses a snapshot or fork past the tenant's count or bytes; the other tenant still snapshots", function()
    local a = create("alice", "qa")
    local b = create("bob", "qb")
    local taken = {}
    for i = 1, 2 do
      local st, doc, body = verb("alice", "qa", a.secret, "snapshot", "?name=n" .. i)
      assert.equal(200, st, body)
      taken[i] = doc.snapshot
    end
    local before = snapshots(P)
    assert.equal(2, count(before))
    -- the third: over the count, refused with the typed error, nothing made
    local st, doc, body = verb("alice", "qa", a.secret, "snapshot")
    assert.equal(429, st, body)
    assert.equal("limit", doc.error.kind)
    assert.equal("snapshot_count", doc.error.reason)
    assert.truthy(doc.error.message:find("DELETE /snapshots/", 1, true), doc.error.message)
    assert.is_number(taken[1].bytes)
    -- a fork makes a snapshot too: refused, and no child session is left behind
    st, doc, body = verb("alice", "qa", a.secret, "fork", "?key=qa-child")
    assert.equal(429, st, body)
    assert.equal("snapshot_count", doc.error.reason)
    assert.equal(404, (node:api("GET", "/sessions/qa-child", { token = TOKENS.alice, secret = a.secret })))
    assert.same(before, snapshots(P))
    -- bob is not alice: his first snapshot is taken
    st, doc, body = verb("bob", "qb", b.secret, "snapshot")
    assert.equal(200, st, body)
    assert.equal(3, count(snapshots(P)))
    -- bob's guest writes 40 MiB: over his 32 MiB, refused before anything is copied
    fill(node, "bob", "qb", 40)
    st, doc, body = verb("bob", "qb", b.secret, "snapshot")
    assert.equal(429, st, body)
    assert.equal("snapshot_bytes", doc.error.reason)
    assert.equal(3, count(snapshots(P)))
    -- the tenant's own view: what it holds against its quota
    local lst, list = node:api("GET", "/snapshots", { token = TOKENS.alice })
    assert.equal(200, lst)
    assert.same({ count = 2, bytes = 32 * MiB }, list.quota)
    assert.equal(2, list.used.count)
    assert.equal(2, #list.snapshots)
    delete("alice", "qa", a.secret)
    delete("bob", "qb", b.secret)
    assert.same({ true, {} }, { settle(P, {}) })
  end)

  it("removes a session's snapshots with it unless kept; a kept one is the tenant's to delete", function()
    local a = create("alice", "ka")
    local st, doc, body = verb("alice", "ka", a.secret, "snapshot", "?name=gone")
    assert.equal(200, st, body)
    local gone = doc.snapshot.id
    st, doc, body = verb("alice", "ka", a.secret, "snapshot", "?name=kept&keep=1")
    assert.equal(200, st, body)
    local kept, keep = doc.snapshot.id, doc.snapshot.keep
    local all = snapshots(P)
    assert.equal(1, #all[gone].volumes)
    assert.truthy(all[gone].image)
    delete("alice", "ka", a.secret)
    assert.same({ true, { kept } }, { settle(P, { kept }) }) -- neither the other's image nor its copy is left
    assert.is_true(keep)
    all = snapshots(P)
    assert.truthy(all[kept].image and #all[kept].volumes == 1, "the kept snapshot stays whole")
    -- bob cannot see or delete it; alice lists and deletes it
    local _, blist = node:api("GET", "/snapshots", { token = TOKENS.bob })
    assert.same({}, blist.snapshots)
    assert.equal(404, (node:api("DELETE", "/snapshots/" .. kept, { token = TOKENS.bob })))
    local _, alist = node:api("GET", "/snapshots", { token = TOKENS.alice })
    assert.equal(1, #alist.snapshots)
    assert.same({ kept, "ka", true }, { alist.snapshots[1].id, alist.snapshots[1].session, alist.snapshots[1].keep })
    st, _, body = node:api("DELETE", "/snapshots/" .. kept, { token = TOKENS.alice, timeout = 180 })
    assert.equal(200, st, body)
    assert.same({}, snapshots(P))
    assert.equal(404, (node:api("DELETE", "/snapshots/" .. kept, { token = TOKENS.alice })))
  end)

  it("drops a fork's volume copies once the child runs, and its image with the child", function()
    local a = create("alice", "fa")
    local st, child, body = verb("alice", "fa", a.secret, "fork", "?key=fa-child")
    assert.equal(201, st, body)
    local id = child.snapshot.id
    local s = snapshots(P)[id]
    assert.truthy(s and s.image, "the child's sandbox runs the fork's image")
    assert.same({}, s.volumes) -- the child's volumes were filled at its start: the copies are not needed
    -- the engine itself refuses to remove an image a container runs
    local out = h.sh("docker image rm " .. h.q(s.image) .. " 2>&1")
    assert.truthy(out:find("conflict", 1, true), out)
    -- the parent goes; the child, and the image it runs, stay
    delete("alice", "fa", a.secret)
    assert.truthy(snapshots(P)[id])
    assert.equal(200, (node:api("GET", "/sessions/fa-child/echo/x", { secret = child.secret, timeout = 10 })))
    delete("alice", "fa-child", child.secret)
    assert.same({ true, {} }, { settle(P, {}) })
  end)
end)

describe("gateway snapshots: expiry removes them and sweeps orphans #nginx #docker", function()
  local P = gh.PREFIX .. "se-"
  local node

  setup(function()
    node = gh.start(gh.config { name = "node-" .. gh.run_id .. "-se", project_prefix = P, stack = stack(),
      idle_ttl = 30, max_ttl = 3600, expiry_interval = 1 })
    assert(node:wait_adopted(60), node:error_log())
  end)

  teardown(function()
    if node then node:stop() end
    cleanup(P)
    h.sh("docker volume rm $(docker volume ls -q --filter label=io.sandstack.snapshot.source=" .. P .. "orphan) 2>/dev/null")
  end)

  -- A volume that looks like a snapshot's copy of this gateway (or another), owned by a session
  -- that no longer exists.
  local function orphan(node_name, keep)
    local name = "sstest-orphan-" .. core.random_hex(4):lower()
    h.must(("docker volume create %s --label io.sandstack.snapshot=snap-%s --label io.sandstack.snapshot.source=%s"
      .. " --label io.sandstack.created=1 --label io.sandstack.gateway=%s --label io.sandstack.gateway.tenant=alice"
      .. " --label io.sandstack.gateway.session=gone --label io.sandstack.gateway.created=1"
      .. " --label io.sandstack.gateway.keep=%s >/dev/null"):format(name, core.random_hex(6):lower(), P .. "orphan",
      node_name, keep and "1" or "0"))
    return name
  end
  local function exists(volume) return h.sh("docker volume ls -q --filter name=^" .. volume .. "$"):find(volume, 1, true) end

  it("removes the snapshots of an idle session and of one its stack's ttl ended", function()
    local st, a, body = node:api("POST", "/sessions/ia", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, body)
    local b
    st, b, body = node:api("POST", "/sessions/ib", { token = TOKENS.alice, timeout = 180 })
    assert.equal(201, st, body)
    for _, s in ipairs { { "ia", a }, { "ib", b } } do
      -- a proxied request first: the idle clock starts again, so the session outlives its snapshot
      assert.equal(200, (node:api("GET", "/sessions/" .. s[1] .. "/echo/x", { secret = s[2].secret, timeout = 10 })))
      st, _, body = node:api("POST", "/sessions/" .. s[1] .. "/snapshot", { token = TOKENS.alice, secret = s[2].secret,
        timeout = 180 })
      assert.equal(200, st, body .. node:error_log():sub(-3000))
    end
    assert.equal(2, count(snapshots(P)))
    -- ib's stack ends by its own ttl (the backend's reap): the session leaves the table
    local _ -- the answer this test does not read
    st, _, body = node:api("PATCH", "/sessions/ib", { token = TOKENS.alice, secret = b.secret, body = '{"ttl": 1}' })
    assert.equal(200, st, body)
    -- ia idles out after 30 s
    h.wait_for(function() return "both sessions idle out: " .. node:error_log():sub(-3000) end, function()
      return node:api("GET", "/sessions/ia", { token = TOKENS.alice, secret = a.secret }) == 404
        and node:api("GET", "/sessions/ib", { token = TOKENS.alice, secret = b.secret }) == 404
    end, 90, 0.2)
    assert.same({ true, {} }, { settle(P, {}) })
    assert.equal(0, gh.count(P))
  end)

  it("sweeps this gateway's orphans, never a kept one or another gateway's", function()
    local mine, kept, other = orphan(node.conf.name, false), orphan(node.conf.name, true), orphan("elsewhere", false)
    h.wait_for(function() return "the orphan swept: " .. node:error_log():sub(-3000) end,
      function() return not exists(mine) end, 20, 0.2)
    assert.truthy(exists(kept))
    assert.truthy(exists(other))
    h.must("docker volume rm " .. kept .. " " .. other)
  end)
end)
