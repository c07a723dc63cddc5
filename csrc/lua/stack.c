/* Placeholder: the stack part registers its functions here. */
#include "lua/binding.h"

void sandstack_open_stack(lua_State *L) { (void)L; }
