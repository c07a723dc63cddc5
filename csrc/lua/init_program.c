/* sandstack-init's side in core.so (lua/sandstack/docker/deadline.lua):
 *   core.init_program() -> the bytes of sandstack-init (csrc/init), included by the build
 *   core.deadline_file(deadline) -> the deadline file's text (deadline: whole epoch seconds, 0
 *       for none; raises for anything else)
 *   core.DEADLINE = { dir, program, file, signal, exit, grace_ms, check_interval }:
 *       csrc/deadline/deadline.h */
#include "deadline/deadline.h"
#include "lua/binding.h"

#ifndef SANDSTACK_INIT_PATH
#error "SANDSTACK_INIT_PATH: the build passes the path of the sandstack-init program"
#endif

__asm__(".pushsection .rodata\n"
        ".balign 16\n"
        ".globl ss_init_program_start\n.hidden ss_init_program_start\n"
        "ss_init_program_start:\n"
        ".incbin \"" SANDSTACK_INIT_PATH "\"\n"
        ".globl ss_init_program_end\n.hidden ss_init_program_end\n"
        "ss_init_program_end:\n"
        ".popsection\n");

extern const char ss_init_program_start[] __attribute__((visibility("hidden")));
extern const char ss_init_program_end[] __attribute__((visibility("hidden")));

static int l_init_program(lua_State *L) {
  lua_pushlstring(L, ss_init_program_start, (size_t)(ss_init_program_end - ss_init_program_start));
  return 1;
}

static int l_deadline_file(lua_State *L) {
  lua_Number v = luaL_checknumber(L, 1);
  char out[DL_FILE_MAX];
  int n = v >= 0 && v <= (lua_Number)DL_NUMBER_MAX && v == (lua_Number)(int64_t)v ? dl_format((int64_t)v, out, sizeof out) : -1;
  if (n < 0) return luaL_argerror(L, 1, "a deadline is whole epoch seconds (at most 15 digits), 0 for none");
  lua_pushlstring(L, out, (size_t)n);
  return 1;
}

static void set_int(lua_State *L, const char *key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

void sandstack_open_init(lua_State *L) {
  static const luaL_Reg fns[] = {{"init_program", l_init_program}, {"deadline_file", l_deadline_file}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_createtable(L, 0, 7);
  lua_pushstring(L, DL_DIR);
  lua_setfield(L, -2, "dir");
  lua_pushstring(L, DL_PROGRAM);
  lua_setfield(L, -2, "program");
  lua_pushstring(L, DL_FILE);
  lua_setfield(L, -2, "file");
  set_int(L, "signal", DL_CONTROL_SIGNAL);
  set_int(L, "exit", DL_EXIT_DEADLINE);
  set_int(L, "grace_ms", DL_GRACE_MS);
  set_int(L, "check_interval", DL_CHECK_INTERVAL_S);
  lua_setfield(L, -2, "DEADLINE");
}
