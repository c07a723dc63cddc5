/* A snapshot's own Engine requests for Lua (csrc/stack/snapshot.h), used by
 * lua/sandstack/docker/snapshot_helper.lua:
 *   core.tree_program() -> the bytes of sandstack-tree (csrc/tree), included by the build, so
 *       the module carries the helper's program wherever it is installed
 *   core.tree_helper_create(name, args) -> the keyed create request of a copy or diff helper
 *   core.tree_image() -> archive, tag: the helper's image (sandstack-tree alone) for
 *       POST /images/load, and its name "sandstack/tree:<16 hex of the program's SHA-256>"
 *   core.snapshot_image_archive(committed_json, base_json, labels, repo_tag) -> archive, or
 *       nil, error (invalid/bad_answer): the inspect answers as the engine's JSON text, kept
 *       byte for byte (a config goes back to the engine with every type it had)
 * Misuse (a missing argument) raises: the callers are sandstack's own files. */
#include <stdlib.h>

#include "lua/binding.h"
#include "lua/incbin.h"
#include "stack/snapshot.h"
#include "util/sha256.h"

#ifndef SANDSTACK_TREE_PATH
#error "SANDSTACK_TREE_PATH: the build passes the path of the sandstack-tree program"
#endif

SS_INCBIN(ss_tree_program, SANDSTACK_TREE_PATH);

static int l_tree_program(lua_State *L) {
  lua_pushlstring(L, ss_tree_program_start, (size_t)(ss_tree_program_end - ss_tree_program_start));
  return 1;
}

static int push_buf(lua_State *L, ss_buf *b) {
  lua_pushlstring(L, b->data ? b->data : "", b->len);
  ss_buf_free(b);
  return 1;
}

static int l_tree_helper_create(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  cJSON *args = ss_table_arg(L, 2, "tree_helper_create");
  const char *why = NULL;
  cJSON *r = ss_tree_helper_create(name, args, &why);
  cJSON_Delete(args);
  if (!r) return luaL_error(L, "tree_helper_create: %s", why);
  ss_json_to_lua(L, r);
  cJSON_Delete(r);
  return 1;
}

static int l_tree_image(lua_State *L) {
  const char *prog = ss_tree_program_start;
  size_t n = (size_t)(ss_tree_program_end - ss_tree_program_start);
  char hash[17], tag[64];
  ss_sha256_hex(prog, n, 8, hash);
  snprintf(tag, sizeof tag, "sandstack/tree:%s", hash);
  ss_buf b;
  ss_buf_init(&b, n + 64 * 1024);
  if (ss_tree_image_archive(prog, n, tag, &b) != 0) {
    ss_buf_free(&b);
    return luaL_error(L, "tree_image: out of memory");
  }
  push_buf(L, &b);
  lua_pushstring(L, tag);
  return 2;
}

static int l_snapshot_image_archive(lua_State *L) {
  size_t cn, bn;
  const char *committed_text = luaL_checklstring(L, 1, &cn), *base_text = luaL_checklstring(L, 2, &bn);
  const char *tag = luaL_checkstring(L, 4);
  cJSON *labels = ss_table_arg(L, 3, "snapshot_image_archive");
  cJSON *committed = cJSON_ParseWithLength(committed_text, cn), *base = cJSON_ParseWithLength(base_text, bn);
  const char *why = "an inspect answer is not JSON";
  ss_buf b;
  ss_buf_init(&b, 16u << 20);
  int rc = committed && base ? ss_snapshot_image_archive(committed, base, labels, tag, &b, &why) : -1;
  cJSON_Delete(committed);
  cJSON_Delete(base);
  cJSON_Delete(labels);
  if (rc != 0) {
    ss_buf_free(&b);
    ss_error e;
    ss_error_init(&e);
    ss_error_set(&e, "engine", "bad_answer", "snapshot image: %s", why);
    return ss_push_error(L, &e);
  }
  return push_buf(L, &b);
}

void sandstack_open_snapshot(lua_State *L) {
  static const luaL_Reg fns[] = {{"tree_program", l_tree_program},
                                 {"tree_helper_create", l_tree_helper_create},
                                 {"tree_image", l_tree_image},
                                 {"snapshot_image_archive", l_snapshot_image_archive},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
