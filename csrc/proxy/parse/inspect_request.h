#ifndef SANDSTACK_PROXY_INSPECT_REQUEST_H
#define SANDSTACK_PROXY_INSPECT_REQUEST_H
/* The HTTP/1.1 request read inside an inspected TLS connection, and the head the proxy sends
 * on to the real host. Pure (no allocation but the outbound head, no I/O), so the fuzz target
 * csrc/fuzz/fuzz_proxy_inspect.c links exactly what the proxy runs. The head is parsed by
 * http_head.c, as strictly as a plain-HTTP request; on top of that, an inspected request must
 * be origin-form ("/path", the CONNECT named the host) or absolute-form "https://host/path"
 * (RFC 9112 3.2.2: servers accept it), must name the CONNECT host in that authority and in its
 * Host header (ir_host_refusal: else 421), and its body is framed by one Content-Length or by
 * "Transfer-Encoding: chunked" alone (validated as it streams, http_chunked.h), never both and
 * no other coding, so the proxy knows where the request ends: what follows it is the next
 * request, held until this one's response has ended and then checked on its own. */
#include <stddef.h>

#include "proxy/parse/http_head.h"

typedef enum {
  IR_INCOMPLETE = 0, /* read more */
  IR_READY,          /* a request; *out describes it */
  IR_BAD,            /* malformed head: 400 */
  IR_LINE_TOO_LONG,  /* 414 */
  IR_HEAD_TOO_LARGE, /* 431 */
  IR_BAD_VERSION,    /* 505 */
  IR_NOT_ORIGIN,     /* an authority-form or "*" target, or absolute-form other than https: 400 */
  IR_CHUNKED,        /* a Transfer-Encoding other than exactly "chunked", or repeated: 400 */
  IR_BAD_LENGTH,     /* malformed or repeated Content-Length, or Content-Length with Transfer-Encoding: 400 */
} ir_status;

typedef struct ir_request {
  ph_request head;
  const char *authority;    /* of an absolute-form target (points into the buffer), else NULL */
  size_t authority_len;
  const char *path;         /* the origin-form target, or an absolute-form one's path; query included */
  size_t path_len;
  size_t path_noquery_len;  /* of the path before any '?' */
  unsigned long long body_len; /* Content-Length (0 when chunked) */
  int chunked;                 /* Transfer-Encoding: chunked */
  int keep_alive;              /* HTTP/1.1 without "Connection: close" and without a body: another
                                  request may follow */
} ir_request;

/* buf[0..len) holds the decrypted bytes so far; *scanned as for ph_parse. */
ir_status ir_read(const char *buf, size_t len, const ph_limits *lim, size_t *scanned, ir_request *out);
const char *ir_status_text(ir_status s);
/* Whether a Connection field of the head lists "close". */
int ir_connection_close(const ph_request *h);

/* Whether a request read by ir_read names the CONNECT host:port (its authority, when
 * absolute-form, and its Host header; 443 when they give no port). 0 when it does, else the
 * status to answer (400 or 421, see ph_host_refusal) with *why. */
int ir_host_refusal(const ir_request *r, const char *host, int port, const char **why);

/* The head sent to the real host: "METHOD path HTTP/1.1" (origin-form), Host from the CONNECT
 * (host, with ":port" unless 443), the client's headers without those ph_dropped names
 * (hop-by-hop ones, the proxy credentials, method and URL overrides, any header whose name or
 * value holds the token), then "Transfer-Encoding: chunked" for a chunked body and
 * "Connection: close" when the client will send no other request on this connection. With
 * identity (the host is a credential's, whose answers are scrubbed), the client's
 * Accept-Encoding is dropped and "Accept-Encoding: identity" sent instead.
 * malloc'd, NULL when out of memory. */
char *ir_outbound_head(const ir_request *r, const char *host, int port, const char *token, size_t token_len,
                       int identity, size_t *out_len);

#endif
