#ifndef SANDSTACK_LUA_ENGINE_HANDLE_H
#define SANDSTACK_LUA_ENGINE_HANDLE_H
/* What the engine handle class (engine.c) shares with its batch method (engine_batch.c). */
#include "engine/client.h"
#include "lua/binding.h"

/* The open client of the handle at idx; raises when it is not one or is closed. */
sse_client *ss_check_engine_client(lua_State *L, int idx);
/* Pushes a result table as h:take gives it (body as text). */
void ss_push_engine_result(lua_State *L, sse_result *r);
/* h:perform(requests, defaults) (engine_batch.c). */
int ss_engine_perform(lua_State *L);

#endif
