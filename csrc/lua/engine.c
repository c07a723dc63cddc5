/* Placeholder: the engine part registers its functions here. */
#include "lua/binding.h"

void sandstack_open_engine(lua_State *L) { (void)L; }
