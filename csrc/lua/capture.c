/* Binding for the capture reader (csrc/capture): placeholder until it lands. */
#include "lua/binding.h"

void sandstack_open_capture(lua_State *L) { (void)L; }
