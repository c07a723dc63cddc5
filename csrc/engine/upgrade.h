#ifndef SANDSTACK_ENGINE_UPGRADE_H
#define SANDSTACK_ENGINE_UPGRADE_H
/* The head of the daemon's answer to a hijacking request (POST /exec/{id}/start with
 * `Connection: Upgrade`, `Upgrade: tcp`): `101 UPGRADED` (or, from a daemon that ignores the
 * upgrade, `200 OK`) followed by the raw stream on the same connection, or an error status with
 * a JSON body. The connection is read by hand (curl's CONNECT_ONLY), so the status line and
 * the one header that matters are parsed here. Pure: no I/O, fuzzable. */
#include <stddef.h>

typedef struct sse_upgrade_head {
  long status;            /* 100..999 */
  long long content_length; /* -1 when the head has none */
  size_t head_len;        /* bytes of the head, its blank line included */
} sse_upgrade_head;

/* 1: a whole head was parsed into out; 0: more bytes are needed; -1: not an HTTP/1.x answer
 * head (bad status line, a header line without a colon, a bad Content-Length). */
int sse_upgrade_parse(const char *p, size_t n, sse_upgrade_head *out);

#endif
