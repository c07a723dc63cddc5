/* Lua binding of the capture (csrc/capture), used by Stack:capture:
 *   core.capture_mkdir(dir)                      -> true | nil, err ("invalid"/"exists" if it exists)
 *   core.capture_extract(dir, archive_name, {max_bytes =, max_entries =})
 *       -> { skipped = { {name =, type =, reason =}, ... }, files =, dirs =, bytes =, entries = }
 *        | nil, err (dir is then removed with everything in it)
 *   core.capture_remove(dir)                     -> true | nil, err
 *   core.archive_place(engine_handle, transfer_id, parent, name, {max_bytes =, max_entries =})
 *       -> the same report with is_dir | nil, err: a streamed archive (the engine client's mode
 *          "stream") unpacked as it arrives, its top member put at parent/name (capture/place.c)
 * archive_name is a plain name inside dir (the engine client's download); it is unlinked before
 * anything is written. */
#include <math.h>
#include <string.h>

#include "capture/capture.h"
#include "lua/binding.h"
#include "lua/engine_handle.h"

static uint64_t opt_count(lua_State *L, int idx, const char *key, uint64_t def) {
  double v = ss_opt_number(L, idx, key, (double)def);
  if (!(v >= 0 && v <= 9007199254740992.0) || floor(v) != v)
    luaL_error(L, "capture_extract: option '%s' must be a whole number >= 0", key);
  return (uint64_t)v;
}

/* true, or nil, err: what capture_mkdir and capture_remove answer for op(path). */
static int dir_op(lua_State *L, int (*op)(const char *dir, ss_error *e)) {
  const char *dir = luaL_checkstring(L, 1);
  ss_error e;
  ss_error_init(&e);
  if (op(dir, &e) != 0) return ss_push_error(L, &e);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_mkdir(lua_State *L) { return dir_op(L, cap_fresh_dir); }

static int l_remove(lua_State *L) { return dir_op(L, cap_remove_dir); }

static void set_count(lua_State *L, const char *key, uint64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, key);
}

#define CAP_RESULT_MT "sandstack.capture.result"

/* The C report lives in a userdata while its Lua copy is built, so that an out-of-memory error
 * raised meanwhile still frees it (through __gc). */
static int result_gc(lua_State *L) {
  cap_result_free(luaL_checkudata(L, 1, CAP_RESULT_MT));
  return 0;
}

/* A new result userdata (freed by __gc if an error is raised before it is pushed as a table). */
static cap_result *new_result(lua_State *L) {
  cap_result *res = ss_newuserdata(L, sizeof *res);
  memset(res, 0, sizeof *res);
  luaL_getmetatable(L, CAP_RESULT_MT);
  lua_setmetatable(L, -2);
  return res;
}

/* Pushes the report of res and frees it. */
static void push_report(lua_State *L, cap_result *res) {
  lua_createtable(L, 0, 6);
  lua_createtable(L, (int)res->nskipped, 0);
  for (size_t i = 0; i < res->nskipped; i++) {
    lua_createtable(L, 0, 3);
    lua_pushlstring(L, res->skipped[i].name, res->skipped[i].len);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, res->skipped[i].type);
    lua_setfield(L, -2, "type");
    lua_pushstring(L, res->skipped[i].reason);
    lua_setfield(L, -2, "reason");
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "skipped");
  set_count(L, "files", res->files);
  set_count(L, "dirs", res->dirs);
  set_count(L, "bytes", res->bytes);
  set_count(L, "entries", res->entries);
  cap_result_free(res);
}

static cap_options read_options(lua_State *L, int idx, const char *what) {
  static const char *const keys[] = {"max_bytes", "max_entries", NULL};
  ss_check_keys(L, idx, keys, what);
  return (cap_options){opt_count(L, idx, "max_bytes", CAP_DEFAULT_MAX_BYTES),
                       opt_count(L, idx, "max_entries", CAP_DEFAULT_MAX_ENTRIES)};
}

static int l_extract(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  const char *name = luaL_checkstring(L, 2);
  cap_options o = read_options(L, 3, "capture_extract");
  cap_result *res = new_result(L);
  ss_error e;
  ss_error_init(&e);
  if (cap_extract_archive(dir, name, &o, res, &e) != 0) {
    cap_result_free(res);
    return ss_push_error(L, &e);
  }
  push_report(L, res);
  return 1;
}

/* The bytes of a streamed engine answer, as the tar reader pulls them. */
typedef struct {
  sse_client *c;
  long id;
} stream_src;

static ssize_t stream_read(void *ctx, void *buf, size_t n) {
  stream_src *s = ctx;
  return (ssize_t)sse_client_read(s->c, s->id, buf, n);
}

static int l_place(lua_State *L) {
  stream_src s = {ss_check_engine_client(L, 1), (long)luaL_checkinteger(L, 2)};
  const char *parent = luaL_checkstring(L, 3);
  const char *name = luaL_checkstring(L, 4);
  cap_options o = read_options(L, 5, "archive_place");
  cap_result *res = new_result(L);
  cap_source src = {stream_read, &s};
  cap_placed placed;
  ss_error e;
  ss_error_init(&e);
  if (cap_place(parent, name, &src, &o, res, &placed, &e) != 0) {
    cap_result_free(res);
    return ss_push_error(L, &e);
  }
  push_report(L, res);
  lua_pushboolean(L, placed.is_dir);
  lua_setfield(L, -2, "is_dir");
  return 1;
}

void sandstack_open_capture(lua_State *L) {
  static const luaL_Reg none[] = {{NULL, NULL}};
  ss_define_class(L, CAP_RESULT_MT, none, result_gc);
  static const luaL_Reg fns[] = {
      {"capture_mkdir", l_mkdir},
      {"capture_extract", l_extract},
      {"capture_remove", l_remove},
      {"archive_place", l_place},
      {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
