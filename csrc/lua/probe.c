/* Binding for the readiness probe (csrc/probe): placeholder until it lands. */
#include "lua/binding.h"

void sandstack_open_probe(lua_State *L) { (void)L; }
