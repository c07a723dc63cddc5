-- A req_adapter-shaped status check of an agent, over the bounded C probe (core.http_probe,
-- csrc/probe): one plain-http GET with one overall deadline (req.timeout, default 5 s), no
-- redirects, no proxy, the body read up to 64 KiB and dropped. It is what the conformance run
-- and the live specs use to ask "does the agent answer?"; the readiness wait calls the probe
-- directly. The agent is untrusted, so there is no way to follow a redirect or keep the body:
-- res = {status =, headers = {}, body = "", bytes =, truncated =}, or nil, err.
local E = require "sandstack.error"

local M = {}

function M.request(req)
  local core = require "sandstack.core"
  local method = req.method or "GET"
  if method ~= "GET" or req.body ~= nil then
    return E.fail("invalid", "unsupported_request", "sandstack.docker.http only sends a GET without a body (a status check)")
  end
  local r, err = core.http_probe(req.url, { timeout = req.timeout or 5 })
  if not r then return nil, err end
  return { status = r.status, headers = {}, body = "", bytes = r.bytes, truncated = r.truncated }
end

return M
