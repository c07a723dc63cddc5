/* Lua tables <-> cJSON. The core works on cJSON so that it can be fuzzed and tested without
 * Lua; this file is the one crossing. */
#include <math.h>
#include <string.h>

#include "lua/binding.h"

#define SS_JSON_MAX_DEPTH 64

static cJSON *to_json(lua_State *L, int idx, int skip_functions, ss_error *err, int depth);

/* 0: not a table of keys 1..n (n > 0); else n. */
static size_t array_length(lua_State *L, int idx) {
  size_t count = 0, max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TNUMBER || !ss_isinteger(L, -1)) {
      lua_pop(L, 1);
      return 0;
    }
    lua_Integer k = (lua_Integer)lua_tonumber(L, -1);
    if (k < 1) {
      lua_pop(L, 1);
      return 0;
    }
    if ((size_t)k > max) max = (size_t)k;
    count++;
  }
  return count == max ? count : 0;
}

static cJSON *table_to_json(lua_State *L, int idx, int skip_functions, ss_error *err, int depth) {
  size_t n = array_length(L, idx);
  if (n > 0) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, (int)i);
      cJSON *item = to_json(L, ss_absindex(L, -1), 0, err, depth + 1);
      lua_pop(L, 1);
      if (!item) {
        cJSON_Delete(arr);
        return NULL;
      }
      cJSON_AddItemToArray(arr, item);
    }
    return arr;
  }
  cJSON *obj = cJSON_CreateObject();
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      ss_error_set(err, "invalid", "mixed_table", "a table mixes list entries and named keys");
      cJSON_Delete(obj);
      return NULL;
    }
    const char *key = lua_tostring(L, -2);
    if (skip_functions && lua_type(L, -1) == LUA_TFUNCTION) {
      lua_pop(L, 1);
      continue;
    }
    cJSON *item = to_json(L, ss_absindex(L, -1), 0, err, depth + 1);
    if (!item) {
      lua_pop(L, 2);
      if (!err->fields || !cJSON_GetObjectItemCaseSensitive(err->fields, "option"))
        ss_error_field_str(err, "option", key);
      cJSON_Delete(obj);
      return NULL;
    }
    cJSON_AddItemToObject(obj, key, item);
    lua_pop(L, 1);
  }
  return obj;
}

static cJSON *to_json(lua_State *L, int idx, int skip_functions, ss_error *err, int depth) {
  if (depth > SS_JSON_MAX_DEPTH) {
    ss_error_set(err, "invalid", "too_deep", "a table nests deeper than %d levels", SS_JSON_MAX_DEPTH);
    return NULL;
  }
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return cJSON_CreateNull();
    case LUA_TBOOLEAN:
      return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: {
      double d = (double)lua_tonumber(L, idx);
      if (isnan(d) || isinf(d)) {
        ss_error_set(err, "invalid", "bad_number", "a number is NaN or infinite");
        return NULL;
      }
      return cJSON_CreateNumber(d);
    }
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      if (strlen(s) != len) {
        ss_error_set(err, "invalid", "nul_in_string", "a string contains a NUL byte");
        return NULL;
      }
      return cJSON_CreateString(s);
    }
    case LUA_TTABLE:
      return table_to_json(L, idx, skip_functions, err, depth);
    default:
      ss_error_set(err, "invalid", "bad_type", "a %s cannot be encoded as JSON", luaL_typename(L, idx));
      return NULL;
  }
}

cJSON *ss_lua_to_json(lua_State *L, int idx, int skip_functions, ss_error *err) {
  luaL_checkstack(L, SS_JSON_MAX_DEPTH * 3 + 10, "JSON conversion");
  return to_json(L, ss_absindex(L, idx), skip_functions, err, 0);
}

static void push_number(lua_State *L, double d) {
  if (d == floor(d) && fabs(d) < 9007199254740992.0)
    lua_pushinteger(L, (lua_Integer)d);
  else
    lua_pushnumber(L, d);
}

void ss_json_to_lua(lua_State *L, const cJSON *item) {
  luaL_checkstack(L, 4, "JSON conversion");
  if (cJSON_IsNull(item) || cJSON_IsInvalid(item)) {
    lua_pushnil(L);
  } else if (cJSON_IsBool(item)) {
    lua_pushboolean(L, cJSON_IsTrue(item));
  } else if (cJSON_IsNumber(item)) {
    push_number(L, item->valuedouble);
  } else if (cJSON_IsString(item)) {
    lua_pushstring(L, item->valuestring);
  } else if (cJSON_IsArray(item)) {
    lua_createtable(L, cJSON_GetArraySize(item), 0);
    int i = 1;
    const cJSON *c;
    cJSON_ArrayForEach(c, item) {
      ss_json_to_lua(L, c);
      lua_rawseti(L, -2, i++);
    }
  } else if (cJSON_IsObject(item)) {
    lua_newtable(L);
    const cJSON *c;
    cJSON_ArrayForEach(c, item) {
      ss_json_to_lua(L, c);
      lua_setfield(L, -2, c->string);
    }
  } else {
    lua_pushnil(L);
  }
}

int ss_push_json_string(lua_State *L, cJSON *j) {
  char *s = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  if (!s) return luaL_error(L, "out of memory");
  lua_pushstring(L, s);
  cJSON_free(s);
  return 1;
}

cJSON *ss_table_arg(lua_State *L, int idx, const char *what) {
  luaL_checktype(L, idx, LUA_TTABLE);
  ss_error err;
  ss_error_init(&err);
  cJSON *j = ss_lua_to_json(L, idx, 1, &err);
  if (!j) {
    lua_pushfstring(L, "%s: %s", what, err.message);
    ss_error_clear(&err);
    lua_error(L);
  }
  return j;
}
