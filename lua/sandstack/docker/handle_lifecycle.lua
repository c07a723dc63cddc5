-- The docker handle's part for a session over time (mixed in by docker/handle.lua): pause,
-- resume, hibernate, wake, snapshot, fork, changes, set_timeout, expires
-- (docker/session_methods.lua and the files it names).
return { methods = require("sandstack.docker.session_methods").methods() }
