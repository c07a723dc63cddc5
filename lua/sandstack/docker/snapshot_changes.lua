-- h:changes (internal to docker/snapshot.lua): the sandbox's filesystem changes since its
-- container was made, and each declared volume against a snapshot's copy.
local core = require "sandstack.core"
local E = require "sandstack.error"
local batch = require "sandstack.stack.batch"
local H = require "sandstack.docker.snapshot_helper"
local options = require "sandstack.docker.snapshot_options"

local M = {}
local R = core.session_requests

local KINDS = { [0] = "changed", [1] = "added", [2] = "deleted" }

local CHANGES_KEYS = E.described {
  { "since", type = "a snapshot record", default = "the start",
    refused = "not a snapshot record" },
}

-- h:changes{since = snap} -> { sandbox = { {path =, kind = "added"|"changed"|"deleted"}, ... },
-- workspace = { [volume key] = { same form } } }: sandbox is the sandbox's filesystem since its
-- container was made (the engine's diff; volumes are not in it), workspace (with since only)
-- each declared volume against the snapshot's copy: its regular files, compared byte for byte by
-- sandstack-tree in a confined helper (docker/snapshot_helper.lua), never by the guest's tools.
function M.changes(self, opts)
  if not self.eng then require("sandstack.session").closed("sandstack.docker.reconnect or open") end
  opts = E.check_keys(opts, CHANGES_KEYS, "changes")
  if opts.since ~= nil then
    local ok, err = options.check(opts.since, "changes", "since")
    if not ok then return nil, err end
  end
  local sandbox = self.plan.project .. "-" .. self.plan.sandbox
  local r = batch.run(self.eng, R("changes", { sandbox }), 60)[1]
  if not r.ok then return nil, r.err end
  local out = { sandbox = {} }
  for _, c in ipairs(type(r.body) == "table" and r.body or {}) do
    out.sandbox[#out.sandbox + 1] = { path = c.Path, kind = KINDS[c.Kind] or tostring(c.Kind) }
  end
  if opts.since then
    local facts, err = H.sandbox_facts(self.eng, sandbox)
    if not facts then return nil, err end
    local helper; helper, err = H.image(self.eng)
    if not helper then return nil, err end
    local jobs = {}
    for key, src in pairs(opts.since.volumes or {}) do
      jobs[#jobs + 1] = { mode = "diff", old = src, new = self.project .. "-" .. key, key = key }
    end
    local answers; answers, err = H.run(self.eng, jobs, { image = helper, runtime = facts.runtime,
      project = self.project, deadline = core.engine_clock() + H.COPY_SECONDS, seconds = H.COPY_SECONDS,
      what = "changes" })
    if not answers then return nil, err end
    out.workspace = {}
    for i, job in ipairs(jobs) do
      local list; list, err = H.parse_diff(answers[i], job.new)
      if not list then return nil, err end
      out.workspace[job.key] = list
    end
  end
  return out
end

return M
