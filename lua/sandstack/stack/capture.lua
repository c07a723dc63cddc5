-- capture: copies a directory out of the sandbox into a fresh host directory (0700), for both
-- backends' handles. The archive is downloaded into dir, bounded, and unpacked by the C core's
-- safe extractor (csrc/capture), which writes regular files and directories only and reports
-- the rest. Where the archive comes from is the backend's: the container's archive (the
-- get_archive operation) on the engine that runs it (the host's, or a swarm node's).
local ops = require "sandstack.engine.ops"
local core = require "sandstack.core"
local E = require "sandstack.error"

local M = {}

local KEYS = E.described {
  { "max_bytes", E.COUNT0, type = "whole bytes", default = "1 GiB",
    refused = "below 0" },
  { "max_entries", E.COUNT0, type = "whole count", default = "100000",
    refused = "below 0" },
  { "timeout", E.SECONDS0, type = "seconds", default = "the handle's",
    refused = "below 0" },
}

-- The argument checks: a wrong type raises at the caller of the capture method, a refused value
-- is nil, err. -> opts | nil, err
function M.args(dir, opts)
  E.want(dir, "string", "capture", "argument 'dir'")
  if dir == nil or dir == "" then E.raise("capture: argument 'dir' must be a non-empty string") end
  return E.options(opts, KEYS, "capture")
end

-- The capture itself: eng's download of container's archive of path, opts as
-- checked by M.args. Returns true and the list of skipped members ({ name =, type =, reason = }),
-- or nil, err; on failure dir is removed again.
function M.take(eng, container, path, dir, opts)
  local max_bytes = opts.max_bytes or 1024 * 1024 * 1024
  local max_entries = opts.max_entries or 100000
  local ok, err = core.capture_mkdir(dir)
  if not ok then return nil, err end
  -- The archive is bounded too: contents plus, per member, a header, padding and room for a
  -- pax or long-name header; the extractor's own caps are the exact ones.
  local tarname = ".sandstack-capture-" .. core.random_hex(8) .. ".tar"
  local get = ops.request("get_archive", container, { path = path })
  ok, err = eng:download(get.path, dir .. "/" .. tarname, {
    query = get.query, timeout = opts.timeout,
    max_bytes = max_bytes + (max_entries + 2) * 8192,
  })
  if not ok then
    core.capture_remove(dir)
    return nil, err
  end
  local report
  report, err = core.capture_extract(dir, tarname, { max_bytes = max_bytes, max_entries = max_entries })
  if not report then return nil, err end
  return true, report.skipped
end

return M
