-- Snapshots, restores, forks and changes of a stack (internal to sandstack.docker; the handle's
-- snapshot, fork and changes, and sandstack.docker.snapshots / remove_snapshot / start's
-- from_snapshot). A snapshot is
--   - the sandbox's filesystem as an image: sandstack-snapshot:<id>, the engine's commit of the
--     sandbox loaded again under a config of the sandbox image's own (its environment, command,
--     user) and the snapshot's labels alone, so no token, key, placeholder or project label of
--     the sandbox container's reaches it (csrc/stack/snapshot_image.c says why a commit cannot);
--   - a copy of each named volume of the stack: volume <id>-<volume key>;
--   - the stack's options without any secret, and the egress policy in force (read from the
--     proxy sandstack added).
-- Every object carries io.sandstack.snapshot=<id> (and never io.sandstack.project, so the source
-- stack's destroy leaves it). The stack is paused while the image and the copies are made, so
-- they show one moment, for max_pause seconds at most: past it the snapshot fails, what it made
-- is removed and the stack runs again. Volumes are copied and compared by sandstack-tree in a
-- confined helper of sandstack's own image (docker/snapshot_helper.lua): nothing of the guest's
-- image runs outside the sandbox.
--
-- This module gathers the parts, one concept each:
--   docker/snapshot_take.lua       h:snapshot: the image and the volume copies, the stack paused
--   docker/snapshot_options.lua    the options a snapshot keeps, and a restore's
--   docker/snapshot_restore.lua    a start from a snapshot, and h:fork
--   docker/snapshot_changes.lua    h:changes
--   docker/snapshot_inventory.lua  sandstack.docker.snapshots and remove_snapshot
local H = require "sandstack.docker.snapshot_helper"
local inv = require "sandstack.docker.snapshot_inventory"
local options = require "sandstack.docker.snapshot_options"
local take = require "sandstack.docker.snapshot_take"
local restore = require "sandstack.docker.snapshot_restore"

local M = {}

M.LABEL, M.REPO = inv.LABEL, inv.REPO
M.MAX_PAUSE, M.COPY_SECONDS, M.LATE_COMMIT_SECONDS = take.MAX_PAUSE, H.COPY_SECONDS, take.LATE_COMMIT_SECONDS

M.spec_of = options.spec_of
M.snapshot = take.snapshot
M.start_from, M.fork = restore.start_from, restore.fork
M.changes = require("sandstack.docker.snapshot_changes").changes
M.list, M.remove = inv.list, inv.remove

return M
