#ifndef SANDSTACK_VERSION_H
#define SANDSTACK_VERSION_H
/* The one place the version lives: Lua reads it as sandstack.VERSION, labels carry it. */
#define SANDSTACK_VERSION "0.1.0"
#endif
