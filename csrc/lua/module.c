/* luaopen_sandstack_core: the C half of `require "sandstack"`. Each part registers its own
 * functions; nothing here keeps state outside the returned table, so the module can be
 * loaded in many Lua states at once (OpenResty worker threads). */
#include "lua/binding.h"
#include "lua/engine_handle.h"
#include "util/version.h"

int luaopen_sandstack_core(lua_State *L) {
  lua_newtable(L);
  lua_pushliteral(L, SANDSTACK_VERSION);
  lua_setfield(L, -2, "VERSION");
  sandstack_open_error_class(L);
  sandstack_open_random(L);
  sandstack_open_json(L);
  sandstack_open_sleep(L);
  sandstack_open_digest(L);
  sandstack_open_hostfs(L);
  sandstack_open_hostclaim(L);
  sandstack_open_host_limits(L);
  sandstack_open_engine_process(L);
  sandstack_open_control(L);
  /* The engine handle's methods kept in files of their own; engine.c is handed them. */
  static const luaL_Reg engine_methods[] = {{"perform", ss_engine_perform}, {"exec", ss_engine_exec}, {NULL, NULL}};
  sandstack_open_engine(L, engine_methods);
  sandstack_open_engine_target(L);
  sandstack_open_engine_address(L);
  sandstack_open_engine_attach(L);
  sandstack_open_term(L);
  sandstack_open_stack(L);
  sandstack_open_stack_options(L);
  sandstack_open_stack_requests(L);
  sandstack_open_session_requests(L);
  sandstack_open_policy(L);
  sandstack_open_sbx(L);
  sandstack_open_fileplane(L);
  sandstack_open_capture(L);
  sandstack_open_probe(L);
  sandstack_open_net(L);
  sandstack_open_options(L);
  sandstack_open_where(L);
  sandstack_open_reap(L);
  sandstack_open_listing(L);
  sandstack_open_init(L);
  sandstack_open_snapshot(L);
  sandstack_open_archive(L);
  return 1;
}
