-- Test support: an in-memory stand-in for an ngx.shared dict (the calls the gateway's Lua makes),
-- for the gateway's specs that run without nginx. Test-only.
return function()
  local d = { t = {} }
  function d:get(k) return self.t[k] end
  function d:set(k, v) self.t[k] = v; return true end
  d.safe_set = d.set
  function d:add(k, v) if self.t[k] ~= nil then return false, "exists" end self.t[k] = v; return true end
  d.safe_add = d.add
  function d:delete(k) self.t[k] = nil end
  function d:incr(k, by, init) self.t[k] = (self.t[k] or init) + by; return self.t[k] end
  function d:get_keys() local out = {} for k in pairs(self.t) do out[#out + 1] = k end return out end
  return d
end
