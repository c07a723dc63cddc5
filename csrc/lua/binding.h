#ifndef SANDSTACK_BINDING_H
#define SANDSTACK_BINDING_H
/* Shared helpers of the Lua binding (csrc/lua). Nothing outside csrc/lua includes Lua headers. */
#include <cjson/cJSON.h>

#include "lua/compat.h"
#include "util/error.h"

#define SS_ERROR_MT "sandstack.error"

/* Each part of the module adds its functions to the module table at the top of the stack. */
void sandstack_open_error_class(lua_State *L);
void sandstack_open_random(lua_State *L);
void sandstack_open_json(lua_State *L);
void sandstack_open_sleep(lua_State *L);
void sandstack_open_digest(lua_State *L);
void sandstack_open_hostfs(lua_State *L);
void sandstack_open_engine_address(lua_State *L);
void sandstack_open_hostclaim(lua_State *L);
void sandstack_open_host_limits(lua_State *L);
void sandstack_open_engine_process(lua_State *L);
void sandstack_open_control(lua_State *L);
/* more_methods: the engine handle's methods defined in other files (h:perform, h:exec), which
 * module.c hands in, so engine.c, which they call, never names them. */
void sandstack_open_engine(lua_State *L, const luaL_Reg *more_methods);
void sandstack_open_engine_target(lua_State *L);
void sandstack_open_engine_attach(lua_State *L);
void sandstack_open_term(lua_State *L);
void sandstack_open_stack(lua_State *L);
void sandstack_open_stack_options(lua_State *L);
void sandstack_open_stack_requests(lua_State *L);
void sandstack_open_session_requests(lua_State *L);
void sandstack_open_policy(lua_State *L);
void sandstack_open_sbx(lua_State *L);
void sandstack_open_fileplane(lua_State *L);
void sandstack_open_capture(lua_State *L);
void sandstack_open_probe(lua_State *L);
void sandstack_open_net(lua_State *L);
void sandstack_open_options(lua_State *L);
void sandstack_open_where(lua_State *L);
void sandstack_open_reap(lua_State *L);
void sandstack_open_listing(lua_State *L);
void sandstack_open_init(lua_State *L);
void sandstack_open_snapshot(lua_State *L);
void sandstack_open_archive(lua_State *L);

/* Pushes nil and an error object built from e (then clears e); returns 2 for `return`. */
int ss_push_error(lua_State *L, ss_error *e);
/* Pushes just the error object (a table with the sandstack.error metatable). */
void ss_push_error_object(lua_State *L, ss_error *e);
/* Shorthand: nil, {kind=, reason=, message=}. */
int ss_return_error(lua_State *L, const char *kind, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Lua value -> cJSON. Tables with keys 1..n become arrays, tables with string keys objects,
 * an empty table an empty object. Functions, userdata, mixed keys, NaN, strings with NUL and
 * depth over 64 are refused: returns NULL and writes a reason into err (kind "invalid").
 * With skip_functions, function-valued object members are left out instead. */
cJSON *ss_lua_to_json(lua_State *L, int idx, int skip_functions, ss_error *err);
/* Argument idx, a table, as cJSON (functions skipped); raises "<what>: <reason>" when it is not
 * a table or cannot be converted. For sandstack's own callers. */
cJSON *ss_table_arg(lua_State *L, int idx, const char *what);
/* Prints j unformatted, pushes the string and deletes j (NULL j raises out of memory). */
int ss_push_json_string(lua_State *L, cJSON *j);
/* cJSON -> Lua value pushed on the stack (null -> nil, integral numbers -> integers). */
void ss_json_to_lua(lua_State *L, const cJSON *item);

/* Defines a userdata class: metatable `name` with the methods as __index, and __gc (plus
 * __close on 5.4) set to close_fn, which must be idempotent. Leaves nothing on the stack. */
void ss_define_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction close_fn);

/* Option-table readers for fields of the table at idx; they raise on a wrong type. */
const char *ss_opt_string(lua_State *L, int idx, const char *key, const char *def);
double ss_opt_number(lua_State *L, int idx, const char *key, double def);
int ss_opt_boolean(lua_State *L, int idx, const char *key, int def);
/* Raises "unknown option 'x'" for any key of the table at idx not in allowed (NULL-ended); the
 * same walk as core.check_keys (helpers.c), the same rule as csrc/stack/validate.c (util/keys.h). */
void ss_check_keys(lua_State *L, int idx, const char *const allowed[], const char *what);
/* The same check for a table a Lua caller handed in, raised at the caller outside the library
 * (ss_where; luaL_where(level) when no library directory is registered); a non-table is
 * refused the same way. */
void ss_check_keys_at(lua_State *L, int idx, const char *const allowed[], const char *what, int level);

/* Pushes "file:line: " of the caller a programming error is the fault of: the first Lua frame
 * outside the directory sandstack.error registered (where.c); luaL_where(L, level) without one. */
void ss_where(lua_State *L, int level);
/* Raises "<where>" .. fmt's text (lua_pushfstring's formats), where ss_where(level) points. */
int ss_raise_at(lua_State *L, int level, const char *fmt, ...);

#endif
