-- What the sbx host says about itself before and while a sandbox runs: the host-wide checks of
-- every acquire, and the egress state (rules, secrets, governance) the allowlist is judged
-- against (sandstack.sbx.egress). Read, never written. Internal to sandstack.sbx.
local E = require "sandstack.error"
local cli = require "sandstack.sbx.cli"

local M = {}

-- The host-wide checks of every acquire: SSH agent forwarding off, no MCP server registered.
function M.checks(b)
  local res, err = cli.run(b, { "settings", "get", "ssh.agentForwardingEnabled" })
  if not res then return nil, err end
  local v = res.stdout:match("^%s*(.-)%s*$")
  if v ~= "false" then
    return E.fail("host_not_confined", "ssh_agent_forwarding",
      "SSH agent forwarding is on: run `sbx settings set ssh.agentForwardingEnabled false`"
      .. " and then `sbx daemon restart`")
  end
  local mcp, merr = cli.json(b, { "mcp", "ls", "--json" })
  if not mcp then return nil, merr end
  -- an answer without a servers list says nothing about MCP servers: it is malformed, never
  -- read as "none" nor as "one registered"
  if type(mcp) ~= "table" or type(mcp.servers) ~= "table" then
    return E.fail("sbx", "malformed", "mcp ls --json: malformed answer (no \"servers\" list)")
  end
  if next(mcp.servers) ~= nil then
    local names = {}
    for _, s in pairs(mcp.servers) do
      names[#names + 1] = type(s) == "table" and type(s.name) == "string" and s.name or "(unnamed)"
    end
    table.sort(names)
    return E.fail("host_not_confined", "mcp_server",
      "an MCP server is registered (" .. table.concat(names, ", ") .. "); the MCP gateway answers a"
      .. " sandbox even under a deny-all rule: remove it with `sbx mcp rm`")
  end
  return true
end

-- The egress state of the host (and of sandbox `name` when given): { rules =, secrets =,
-- governance = }. probe_host is a host the allowlist admits, for `sbx policy check`.
function M.egress_state(b, name, probe_host)
  local pol, err = cli.json(b, name and { "policy", "ls", name, "--json" } or { "policy", "ls", "--json" })
  if not pol then return nil, err end
  local sargs = { "secret", "ls", "--json" }
  if name then sargs = { "secret", "ls", name, "--json" } end
  local sec, serr = cli.json(b, sargs)
  if not sec then return nil, serr end
  -- exit 1 means "denied" here, with the JSON on stdout
  local chk, cerr = cli.json(b, { "policy", "check", "network", "--json", probe_host }, { ok_codes = { [1] = true } })
  if not chk then return nil, cerr end
  return { rules = pol.rules or {}, secrets = sec,
    governance = type(chk.governance) == "table" and chk.governance.active == true }
end

return M
