-- sandstack.gateway.console_ws: the server side of WebSocket frames (RFC 6455), for the console's
-- terminal. Written here because Debian packages no server for Debian's nginx Lua module. Pure
-- Lua on either interpreter: the reader takes a function that returns exactly n bytes (a
-- cosocket's receive), so the spec feeds it hostile frames from a string.
-- A client's frame is refused, and the connection ends, when it is unmasked, has a reserved bit
-- or an unknown opcode, is a control frame that is fragmented or longer than 125 bytes, has a
-- 64-bit length with the top bit set, or would make a message longer than MAX_MESSAGE.
local M = {}

M.CONT, M.TEXT, M.BINARY, M.CLOSE, M.PING, M.PONG = 0, 1, 2, 8, 9, 10
M.MAX_MESSAGE = 1024 * 1024 -- the terminal's keystrokes and resizes: a megabyte is plenty
local GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

local bxor
if rawget(_G, "bit") or (rawget(_G, "jit") and pcall(require, "bit")) then
  bxor = require("bit").bxor
else
  bxor = assert(load("return function(a, b) return a ~ b end"))()
end

-- accept_key(key, sha1_bin, base64) -> the Sec-WebSocket-Accept of a client's key, or nil when
-- the key is not 16 bytes in base64. sha1_bin and base64 default to nginx's.
function M.accept_key(key, sha1_bin, base64)
  if type(key) ~= "string" or not key:match("^[%w+/]+=*$") or #key ~= 24 then return nil end
  sha1_bin = sha1_bin or ngx.sha1_bin
  base64 = base64 or ngx.encode_base64
  return base64(sha1_bin(key .. GUID))
end

local function be(n, bytes)
  local out = {}
  for i = bytes, 1, -1 do
    out[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(out)
end

-- encode(opcode, payload) -> one final, unmasked frame (a server's frames are never masked).
function M.encode(op, payload)
  payload = payload or ""
  local n = #payload
  local head = string.char(0x80 + op)
  if n < 126 then head = head .. string.char(n)
  elseif n < 65536 then head = head .. string.char(126) .. be(n, 2)
  else head = head .. string.char(127) .. be(n, 8) end
  return head .. payload
end

function M.close_payload(code, reason) return be(code, 2) .. (reason or "") end

local function unmask(mask, data)
  local m = { mask:byte(1, 4) }
  local out, chunk = {}, 4096
  for i = 1, #data, chunk do
    local piece = { data:byte(i, math.min(i + chunk - 1, #data)) }
    for j = 1, #piece do piece[j] = bxor(piece[j], m[(i + j - 2) % 4 + 1]) end
    out[#out + 1] = string.char((table.unpack or unpack)(piece))
  end
  return table.concat(out)
end

-- read_frame(recv) -> fin, opcode, payload | nil, reason.
local function read_frame(recv)
  local h, err = recv(2)
  if not h then return nil, "closed: " .. tostring(err) end
  local b1, b2 = h:byte(1, 2)
  local fin, op = b1 >= 0x80, b1 % 16
  if math.floor(b1 / 16) % 8 ~= 0 then return nil, "reserved bits set" end
  if not (op <= 2 or (op >= 8 and op <= 10)) then return nil, "unknown opcode " .. op end
  if b2 < 0x80 then return nil, "unmasked client frame" end
  local n = b2 % 128
  if op >= 8 and (not fin or n > 125) then return nil, "fragmented or long control frame" end
  if n == 126 then
    local x = recv(2)
    if not x then return nil, "closed" end
    n = x:byte(1) * 256 + x:byte(2)
  elseif n == 127 then
    local x = recv(8)
    if not x then return nil, "closed" end
    if x:byte(1) >= 0x80 then return nil, "64-bit length with the top bit set" end
    n = 0
    for i = 1, 8 do n = n * 256 + x:byte(i) end
  end
  if n > M.MAX_MESSAGE then return nil, "frame too long (" .. n .. " bytes)" end
  local mask = recv(4)
  if not mask then return nil, "closed" end
  local data = ""
  if n > 0 then
    data = recv(n)
    if not data then return nil, "closed" end
  end
  return fin, op, unmask(mask, data)
end

-- reader(recv) -> a function that returns the next message: opcode, payload (TEXT or BINARY,
-- fragments joined; CLOSE, PING, PONG as they come, also between fragments) | nil, reason.
function M.reader(recv)
  local parts, first, size -- a fragmented message in progress, across calls (a PING between)
  return function()
    while true do
      local fin, op, data = read_frame(recv)
      if fin == nil then return nil, op end
      if op >= 8 then return op, data end
      if op == M.CONT then
        if not parts then return nil, "continuation without a first fragment" end
      else
        if parts then return nil, "a new message inside a fragmented one" end
        parts, first, size = {}, op, 0
      end
      size = size + #data
      if size > M.MAX_MESSAGE then return nil, "message too long" end
      parts[#parts + 1] = data
      if fin then
        local whole = table.concat(parts)
        parts = nil
        return first, whole
      end
    end
  end
end

return M
