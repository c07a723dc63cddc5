-- The console terminal's WebSocket frame codec (sandstack.gateway.console_ws) against hostile
-- frames: every refusal ends the connection with a reason, and a good message still reads.
local ws = require "sandstack.gateway.console_ws"

local function be(n, bytes)
  local out = {}
  for i = bytes, 1, -1 do out[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(out)
end

local function xor(a, b)
  local r, bit = 0, 1
  while a > 0 or b > 0 do
    if (a % 2) ~= (b % 2) then r = r + bit end
    a, b, bit = math.floor(a / 2), math.floor(b / 2), bit * 2
  end
  return r
end

-- frame{fin =, op =, payload =, masked = true, rsv = 0, len = (declared length)}: a client frame
local function frame(f)
  local payload = f.payload or ""
  local n = f.len or #payload
  local b1 = (f.fin == false and 0 or 0x80) + (f.rsv or 0) * 16 + f.op
  local masked = f.masked ~= false
  local head = string.char(b1)
  local mbit = masked and 0x80 or 0
  if n < 126 then head = head .. string.char(mbit + n)
  elseif n < 65536 then head = head .. string.char(mbit + 126) .. be(n, 2)
  else head = head .. string.char(mbit + 127) .. (f.len64 or be(n, 8)) end
  if not masked then return head .. payload end
  -- a long payload gets the all-zero mask (still a masked frame): the spec's xor is slow
  local key = #payload > 1000 and { 0, 0, 0, 0 } or { 0x12, 0x34, 0x56, 0x78 }
  if key[1] == 0 then return head .. "\0\0\0\0" .. payload end
  local out = {}
  for i = 1, #payload do out[i] = string.char(xor(payload:byte(i), key[(i - 1) % 4 + 1])) end
  return head .. string.char((table.unpack or unpack)(key)) .. table.concat(out)
end

-- reader over a string: recv(n) gives n bytes or nil, "closed"
local function over(data)
  local pos = 1
  return ws.reader(function(n)
    if pos + n - 1 > #data then return nil, "closed" end
    local s = data:sub(pos, pos + n - 1)
    pos = pos + n
    return s
  end)
end

describe("console WebSocket codec", function()
  it("reads masked text and binary messages, fragments joined, controls between them", function()
    local r = over(frame { op = ws.TEXT, payload = '{"type":"resize"}' }
      .. frame { op = ws.BINARY, fin = false, payload = "ec" }
      .. frame { op = ws.PING, payload = "p" }
      .. frame { op = ws.CONT, payload = "ho hi\n" }
      .. frame { op = ws.BINARY, payload = string.rep("x", 70000) })
    assert.same({ ws.TEXT, '{"type":"resize"}' }, { r() })
    assert.same({ ws.PING, "p" }, { r() })
    assert.same({ ws.BINARY, "echo hi\n" }, { r() })
    local op, data = r()
    assert.equal(ws.BINARY, op)
    assert.equal(string.rep("x", 70000), data)
    assert.is_nil((r()))
  end)

  it("refuses an unmasked client frame", function()
    local op, why = over(frame { op = ws.TEXT, payload = "hi", masked = false })()
    assert.is_nil(op)
    assert.matches("unmasked", why)
  end)

  it("refuses fragmented and long control frames", function()
    local op, why = over(frame { op = ws.PING, fin = false, payload = "x" })()
    assert.is_nil(op); assert.matches("control", why)
    op, why = over(frame { op = ws.CLOSE, payload = string.rep("x", 126) })()
    assert.is_nil(op); assert.matches("control", why)
  end)

  it("refuses an oversize frame before reading its payload, and an oversize message", function()
    local op, why = over(frame { op = ws.BINARY, len = ws.MAX_MESSAGE + 1 })()
    assert.is_nil(op); assert.matches("too long", why)
    op, why = over(frame { op = ws.BINARY, len = 2 ^ 40 })()
    assert.is_nil(op); assert.matches("too long", why)
    op, why = over(frame { op = ws.BINARY, len = 2 ^ 40, len64 = string.char(0x80) .. string.rep("\0", 7) })()
    assert.is_nil(op); assert.matches("top bit", why)
    local half = string.rep("y", math.floor(ws.MAX_MESSAGE / 2) + 1)
    op, why = over(frame { op = ws.BINARY, fin = false, payload = half } .. frame { op = ws.CONT, payload = half })()
    assert.is_nil(op); assert.matches("too long", why)
  end)

  it("refuses reserved bits, unknown opcodes and broken fragment sequences", function()
    local cases = {
      { frame { op = ws.TEXT, rsv = 4, payload = "x" }, "reserved" },
      { frame { op = 3, payload = "x" }, "opcode" },
      { frame { op = 11, payload = "" }, "opcode" },
      { frame { op = ws.CONT, payload = "x" }, "continuation" },
      { frame { op = ws.TEXT, fin = false, payload = "a" } .. frame { op = ws.TEXT, payload = "b" }, "new message" },
      { string.char(0x81), "closed" },                    -- cut in the header
      { frame { op = ws.TEXT, payload = "abc" }:sub(1, -2), "closed" }, -- cut in the payload
    }
    for _, c in ipairs(cases) do
      local op, why = over(c[1])()
      assert.is_nil(op)
      assert.matches(c[2], why)
    end
  end)

  it("encodes unmasked server frames of every length form", function()
    assert.equal("\130\5hello", ws.encode(ws.BINARY, "hello"))
    assert.equal("\130\126\1\0" .. string.rep("a", 256), ws.encode(ws.BINARY, string.rep("a", 256)))
    local big = ws.encode(ws.BINARY, string.rep("b", 65536))
    assert.equal("\130\127\0\0\0\0\0\1\0\0", big:sub(1, 10))
    assert.equal("\136\2\3\232", ws.encode(ws.CLOSE, ws.close_payload(1000)))
  end)

  it("answers a handshake key as RFC 6455's example, and refuses a malformed key", function()
    local function sha1_bin(s)
      local f = assert(io.popen("printf '%s' '" .. s .. "' | openssl sha1 -binary | base64"))
      local out = f:read("*l"); f:close()
      return out
    end
    local function id(s) return s end
    assert.equal("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==", sha1_bin, id))
    for _, bad in ipairs { "", "short", "dGhlIHNhbXBsZSBub25jZQ==' x", string.rep("A", 200) } do
      assert.is_nil(ws.accept_key(bad, sha1_bin, id))
    end
  end)
end)
