-- sandstack.policy: one egress policy language for both backends (docs/policy.md).
--   local p, err = policy.compile{ allow = { "api.example.com", { host = "*.example.com",
--     methods = {"GET"}, paths = {"/v1/*"} }, "db.example.com:5432" } }
--   p:admits(host, method, path, port) -> true, rule_index | false
--   p:explain(...)  -> { admitted =, rule =, reason =, rule_reason = }   (reason: host, method, path, bad_*;
--                      rule_reason: the refusing rule's own `reason` text, as given)
--   p:rules()       -> normalized rules { host =, port =, wildcard =, apex =, methods =, paths =, reason = }
--   A rule table may carry reason = "text" (1..200 printable ASCII characters): the proxy returns it,
--   as given, to a client whose request that rule refuses (docs/policy.md "A rule's reason").
--   p:render()      -> the JSON a proxy receives in SANDSTACK_EGRESS_POLICY
--   policy.load(json) -> the policy a rendered string describes (what a proxy calls)
-- Validation and matching are in C (csrc/policy), shared with the proxy and the sbx backend.
local core = require "sandstack.core"

local M = {}

M.compile = core.policy_compile
M.load = core.policy_load
M.is_policy = core.policy_is

return M
