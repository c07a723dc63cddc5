#ifndef SANDSTACK_DURABLE_H
#define SANDSTACK_DURABLE_H
/* Replaces a small file so that after a crash or a full disk it holds either the old bytes or
 * the new ones, and a success means the new bytes are on disk. */
#include <stddef.h>

#include "util/error.h"

/* Writes data to a fresh 0600 temporary beside path, fsyncs it, renames it over path and
 * fsyncs the directory. 0, or -1 with e set (kind, reason "io") and the temporary removed. */
int ss_write_durable(const char *path, const void *data, size_t len, const char *kind, ss_error *e);

#endif
