#ifndef SANDSTACK_SBX_FSUTIL_H
#define SANDSTACK_SBX_FSUTIL_H
/* The host-side bookkeeping of the sbx backend: workspace directories and records. */
#include <stddef.h>

/* Removes path and everything under it without following symbolic links (a guest-made link
 * is removed, never followed). 0, or -1 with errno. A missing path is success. */
int ss_rmtree(const char *path);

#endif
