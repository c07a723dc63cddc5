#ifndef SANDSTACK_PROXY_INSPECT_SCRUB_H
#define SANDSTACK_PROXY_INSPECT_SCRUB_H
/* The answer of a credential's host inside an inspected connection, scrubbed as a message, not
 * as a byte stream (docs/proxy.md "Responses"). The origin can reflect anything the proxy sent
 * it, a placed secret included, so:
 *  - each head (interim ones too) is held whole and scrubbed as one piece before it goes on;
 *  - the body is scrubbed without its framing: a chunked body is de-chunked, scrubbed with one
 *    carry across chunk boundaries, and sent on in chunks of the proxy's own (trailers are
 *    dropped); a Content-Length or close-delimited body is scrubbed as it is (masks keep lengths);
 *  - an answer whose body is encoded (a Content-Encoding or Transfer-Encoding coding other than
 *    identity and chunked) or whose head or framing the proxy cannot read is not passed on: the
 *    client gets a 502 when nothing of the answer has gone yet, else the connection is cut.
 *    The proxy asked for `Accept-Encoding: identity`, so an honest origin never answers so.
 * Cutting instead of decoding keeps a decompressor (and its bombs) out of the proxy, and a
 * scrub that reads only plain text is one whose guarantee can be stated. */
#include <stddef.h>

#include "proxy/parse/http_response.h"
#include "util/buf.h"

typedef struct proxy_conn proxy_conn;

typedef struct resp_scrub {
  ss_buf head; /* the head being read, held until it is whole (at most HR_MAX_HEAD) */
  int chunked; /* the body goes on in the proxy's own chunks */
  int sent;    /* some of this answer went on (a refusal can then only cut) */
} resp_scrub;

/* Writes n bytes toward the client: 0, or -1 when the connection was closed. */
typedef int (*resp_emit)(proxy_conn *c, const char *data, size_t n);

void resp_scrub_begin(resp_scrub *r);
void resp_scrub_free(resp_scrub *r);
/* The origin's next bytes, through p (hr_begin'd for this request): how many belong to this
 * answer (as hr_feed), or (size_t)-1 when the connection was closed or answered. *ended as
 * hr_feed's (the parser is then freed). */
size_t resp_scrub_feed(proxy_conn *c, resp_scrub *r, hr_parser *p, const char *data, size_t n, int *ended,
                       resp_emit emit);
/* The origin closed: what the scrub held goes on (a cut answer stays cut). -1: closed. */
int resp_scrub_end(proxy_conn *c, resp_scrub *r, hr_parser *p, resp_emit emit);

#endif
