/* Placeholder: the sbx part registers its functions here. */
#include "lua/binding.h"

void sandstack_open_sbx(lua_State *L) { (void)L; }
