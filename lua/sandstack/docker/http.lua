-- The default req_adapter: one HTTP/1.1 request to the agent through the forwarder's port,
-- with a deadline. req = {method, url, headers, body, timeout}; res = {status, headers, body}.
local E = require "sandstack.error"

local M = {}

function M.request(req)
  local ok, http = pcall(require, "socket.http")
  if not ok then
    return E.fail("transport", "no_http_client", "the default req_adapter needs LuaSocket (lua-socket); give req_adapter instead")
  end
  local ltn12 = require "ltn12"
  local chunks = {}
  local headers = {}
  for k, v in pairs(req.headers or {}) do headers[k] = v end
  if req.body then headers["content-length"] = tostring(#req.body) end
  local socket = require "socket"
  local timeout = req.timeout or 5
  local _, status, rheaders = http.request {
    -- a socket of our own with the deadline: http.TIMEOUT would be process-wide state
    create = function()
      local s = socket.tcp()
      s:settimeout(timeout)
      return s
    end,
    url = req.url, method = req.method or "GET", headers = headers,
    source = req.body and ltn12.source.string(req.body) or nil,
    sink = ltn12.sink.table(chunks),
  }
  if type(status) ~= "number" then
    return E.fail("transport", nil, ("%s %s: %s"):format(req.method or "GET", req.url, tostring(status)))
  end
  return { status = status, headers = rheaders or {}, body = table.concat(chunks) }
end

return M
