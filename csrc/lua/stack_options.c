/* core.stack_options(level) -> { { name =, type =, default =, refused = }, ... }: the rows of one
 * level of sandstack.docker.start's options ("start", "service", "mount", "volume", "ready",
 * "network", "port", "credential"), in the reference's order, from the lists the validator
 * reads its names from (csrc/stack/options.h). Raises for an unknown level. core.exec_options():
 * eng:exec's, the same way. */
#include "lua/binding.h"
#include "lua/engine_exec_options.h"
#include "stack/options.h"

static int push_rows(lua_State *L, const ss_option_doc *rows, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, rows[i].name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, rows[i].type);
    lua_setfield(L, -2, "type");
    lua_pushstring(L, rows[i].def);
    lua_setfield(L, -2, "default");
    lua_pushstring(L, rows[i].refused);
    lua_setfield(L, -2, "refused");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_stack_options(lua_State *L) {
  size_t n = 0;
  const ss_option_doc *rows = ss_stack_option_docs(luaL_checkstring(L, 1), &n);
  if (!rows) return luaL_argerror(L, 1, "no such level of the start options");
  return push_rows(L, rows, n);
}

/* core.exec_options() -> the rows of eng:exec's options, from the list its check reads
 * (engine_exec_options.h). */
static int l_exec_options(lua_State *L) {
  static const ss_option_doc EXEC[] = {SS_OPTIONS_EXEC(SS_OPTION_DOC)};
  return push_rows(L, EXEC, sizeof EXEC / sizeof EXEC[0]);
}

void sandstack_open_stack_options(lua_State *L) {
  static const luaL_Reg fns[] = {{"stack_options", l_stack_options}, {"exec_options", l_exec_options}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
