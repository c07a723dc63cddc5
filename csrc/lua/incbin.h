#ifndef SANDSTACK_LUA_INCBIN_H
#define SANDSTACK_LUA_INCBIN_H
/* SS_INCBIN(sym, path): the bytes of the file at path (a string literal the build passes) in
 * the module's read-only data, between sym_start and sym_end: how core.so carries the static
 * programs it hands to helper containers (reap.c, listing.c, snapshot.c) wherever it is installed. */
#define SS_INCBIN(sym, path)                                                                                       \
  __asm__(".pushsection .rodata\n"                                                                                 \
          ".balign 16\n"                                                                                           \
          ".globl " #sym "_start\n.hidden " #sym "_start\n" #sym "_start:\n"                                       \
          ".incbin \"" path "\"\n"                                                                                 \
          ".globl " #sym "_end\n.hidden " #sym "_end\n" #sym "_end:\n"                                             \
          ".popsection\n");                                                                                        \
  extern const char sym##_start[] __attribute__((visibility("hidden")));                                           \
  extern const char sym##_end[] __attribute__((visibility("hidden")))

#endif
