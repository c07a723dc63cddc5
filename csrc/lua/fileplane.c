/* Placeholder: the fileplane part registers its functions here. */
#include "lua/binding.h"

void sandstack_open_fileplane(lua_State *L) { (void)L; }
