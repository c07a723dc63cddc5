/* Placeholder: the policy part registers its functions here. */
#include "lua/binding.h"

void sandstack_open_policy(lua_State *L) { (void)L; }
