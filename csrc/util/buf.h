#ifndef SANDSTACK_UTIL_BUF_H
#define SANDSTACK_UTIL_BUF_H
/* A growable byte buffer with a hard limit: every byte the engine client keeps from the wire,
 * and every byte sandstack-proxy holds for a connection (a request head, a ClientHello, a body
 * on its way to curl, a response head), goes through one of these, so nothing a peer sends can
 * grow memory past the budget its owner set. It depends on nothing (the proxy's parser library
 * links this file too). */
#include <stddef.h>

typedef struct ss_buf {
  char *data; /* NUL-terminated for convenience (the NUL is not counted in len) */
  size_t len, cap;
  size_t limit; /* len never exceeds it */
} ss_buf;

enum { SS_BUF_OK = 0, SS_BUF_OVER = -1, SS_BUF_NOMEM = -2 };

void ss_buf_init(ss_buf *b, size_t limit);
/* Appends all n bytes or none: SS_BUF_OVER when len + n would pass the limit. */
int ss_buf_append(ss_buf *b, const void *p, size_t n);
/* Room for n more bytes at data + len (a reader fills it, then adds to len): SS_BUF_OVER when
 * len + n would pass the limit. */
int ss_buf_reserve(ss_buf *b, size_t n);
/* How many more bytes the limit lets in. */
size_t ss_buf_room(const ss_buf *b);
/* Drops the first n bytes (n <= len). */
void ss_buf_consume(ss_buf *b, size_t n);
/* Hands the bytes over (malloc'd, NUL-terminated, NULL when none were ever kept); b is empty. */
char *ss_buf_take(ss_buf *b, size_t *len);
/* Frees the bytes, first overwriting them when they may hold a secret. */
void ss_buf_wipe(ss_buf *b);
void ss_buf_free(ss_buf *b);

#endif
