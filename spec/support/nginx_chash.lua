-- nginx's `hash KEY consistent` placement, recomputed for the scale-out spec, so that the spec can
-- say beforehand which node a key must land on. Written from ngx_http_upstream_hash_module.c
-- (ngx_http_upstream_update_chash, find_chash_point, get_chash_peer):
--   - each server (its text as written in `server ADDR`) gets weight * 160 points; the string is
--     split at its last ':' when only digits follow (host, port), and point j is
--     crc32 over host, one NUL byte, port and the previous point (0 for the first) as 4 bytes,
--     little-endian (the base state is kept unfinalised between points);
--   - the points are sorted by hash, equal hashes kept once;
--   - a key goes to the first point whose hash is >= crc32(key), wrapping to the first point;
--     a server that cannot be used (tried, down, failed) passes to the next point (after 20
--     points nginx falls back to round robin: with one of three servers unusable, (1/3)^20).
-- Lua 5.3+ integers (busted runs lua5.4 here).
local M = {}

local TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if c & 1 == 1 then c = 0xEDB88320 ~ (c >> 1) else c = c >> 1 end
  end
  TABLE[i] = c
end

-- The running CRC-32 state (init 0xffffffff, not yet inverted) after the bytes of s.
local function update(crc, s)
  for i = 1, #s do
    crc = TABLE[(crc ~ s:byte(i)) & 0xFF] ~ (crc >> 8)
  end
  return crc
end

local function final(crc) return crc ~ 0xFFFFFFFF end

-- crc32(s): the standard CRC-32 (zlib's, nginx's ngx_crc32_long).
function M.crc32(s) return final(update(0xFFFFFFFF, s)) end

local function le32(v)
  return string.char(v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, (v >> 24) & 0xFF)
end

local function split(server)
  if server:sub(1, 5):lower() == "unix:" then return server:sub(6), "" end
  local host, port = server:match("^(.*):(%d*)$")
  if host then return host, port end
  return server, ""
end

-- ring(servers) -> the sorted points { {hash =, server =}, ... }; servers: { "addr:port", ... }
-- or { {server = "addr:port", weight = n}, ... }.
function M.ring(servers)
  local points = {}
  for _, s in ipairs(servers) do
    local server, weight = s, 1
    if type(s) == "table" then server, weight = s.server, s.weight or 1 end
    local host, port = split(server)
    local base = update(update(update(0xFFFFFFFF, host), "\0"), port)
    local prev = 0
    for _ = 1, weight * 160 do
      local hash = final(update(base, le32(prev)))
      points[#points + 1] = { hash = hash, server = server }
      prev = hash
    end
  end
  table.sort(points, function(a, b) return a.hash < b.hash end)
  local kept = { points[1] }
  for i = 2, #points do
    if points[i].hash ~= kept[#kept].hash then kept[#kept + 1] = points[i] end
  end
  return kept
end

-- place(points, key, unusable) -> the server the key lands on; unusable: a set of servers
-- passed over (nginx's failed or tried ones), nil when every server is.
function M.place(points, key, unusable)
  local hash = M.crc32(key)
  local lo, hi = 1, #points + 1 -- first point with hash >= key's hash; #points + 1 wraps
  while lo < hi do
    local mid = (lo + hi) // 2
    if points[mid].hash < hash then lo = mid + 1 else hi = mid end
  end
  for i = 0, #points - 1 do
    local p = points[(lo - 1 + i) % #points + 1]
    if not (unusable and unusable[p.server]) then return p.server end
  end
  return nil
end

return M
