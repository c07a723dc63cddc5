-- The docker handle's part for a session over time (mixed in by docker/handle.lua): pause,
-- resume, hibernate, wake (docker/lifecycle.lua), snapshot, fork, changes (docker/snapshot.lua),
-- set_timeout, expires (docker/expiry.lua). A fork starts its child with sandstack.docker's
-- start, which docker/starter.lua hands over.
local L = require "sandstack.docker.lifecycle"
local snapshot = require "sandstack.docker.snapshot"
local expiry = require "sandstack.docker.expiry"
local starter = require "sandstack.docker.starter"

local m = { pause = L.pause, resume = L.resume, hibernate = L.hibernate, wake = L.wake,
  snapshot = snapshot.snapshot, changes = snapshot.changes, set_timeout = expiry.set_timeout,
  expires = expiry.expires }
function m.fork(self, new_key, opts)
  return snapshot.fork(self, new_key, opts, starter.get())
end

return { methods = m }
