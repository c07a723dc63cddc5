#ifndef SANDSTACK_UTIL_IO_H
#define SANDSTACK_UTIL_IO_H
/* Plain descriptor I/O shared by the core and sandstack-proxy (one home for what was
 * written five times). */
#include <stddef.h>

/* Writes all n bytes of data to fd, retrying after EINTR and short writes: 0, or -1 with errno
 * set (EIO for a write that took nothing, which would otherwise loop forever). */
int ss_write_all(int fd, const void *data, size_t n);

/* Reads the start of the file at path (at most cap - 1 bytes; cap >= 1) into buf and ends it
 * with a NUL, for the small files the kernel answers (/proc): the length read, or -1 with errno
 * set. A longer file is cut at cap - 1: callers size cap for what they parse. */
long ss_read_head(const char *path, char *buf, size_t cap);

#endif
