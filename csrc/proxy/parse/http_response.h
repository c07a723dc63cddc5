#ifndef SANDSTACK_PROXY_HTTP_RESPONSE_H
#define SANDSTACK_PROXY_HTTP_RESPONSE_H
/* Where a response ends (RFC 9112 section 6.3), so an inspected connection can carry several
 * requests: the proxy reads the next request from the sandbox, and checks it, only once the
 * origin's answer to the last one has ended. The proxy passes the response on byte for byte and
 * this parser only watches it.
 *
 * The rules, in order: the answer to HEAD, any 1xx, 204 and 304 end with their head (a 1xx
 * other than 101 is interim: the final response follows it); Transfer-Encoding whose last
 * coding is chunked is read as chunked (http_chunked.h), any other Transfer-Encoding until the
 * origin closes; one valid Content-Length (repeats allowed when all equal) gives the length;
 * otherwise the body runs until the origin closes. When the framing is unclear (a malformed
 * head, Content-Length beside Transfer-Encoding, differing Content-Lengths, a bad chunk,
 * 101) the parser does not guess: the response runs until the origin closes, and the
 * connection is not kept alive (keep_alive = 0). Also not kept alive: HTTP/1.0, or
 * "Connection: close". Pure (the head is gathered in a buffer it allocates, nothing else), so
 * csrc/fuzz/fuzz_proxy_response.c links exactly what the proxy runs. */
#include <stddef.h>

#include "proxy/parse/http_chunked.h"
#include "util/buf.h"

#define HR_MAX_HEAD 65536 /* a longer head is not parsed: the response runs until close */

typedef enum { HR_HEAD, HR_LENGTH, HR_CHUNKED, HR_UNTIL_CLOSE, HR_DONE } hr_phase;

typedef struct hr_parser {
  hr_phase phase;
  int head_request;           /* the request was HEAD: no body whatever the head says */
  int status;                 /* the final response's status (0 until its head was read) */
  int keep_alive;             /* the connection may carry another request after this response */
  int coded;                  /* the final head names a Content-Encoding, or a Transfer-Encoding
                                 coding, other than identity and chunked: the body is not plain */
  int unread;                 /* a head or the chunked framing could not be read (phase is then
                                 HR_UNTIL_CLOSE): what the bytes are is not known for certain */
  unsigned heads;             /* heads read whole so far (interim ones included) */
  unsigned long long left;    /* HR_LENGTH: body bytes still to come */
  hc_decoder chunks;          /* HR_CHUNKED */
  ss_buf head;                /* HR_HEAD: the head's bytes so far (at most HR_MAX_HEAD) */
  size_t scanned;
} hr_parser;

void hr_begin(hr_parser *p, int head_request);
void hr_free(hr_parser *p);
/* data[0..n) are the origin's next bytes. Returns how many belong to this response (fewer than
 * n only when it ended inside data: the rest came after it), or (size_t)-1 when out of memory.
 * *ended is set when the response is complete (phase HR_DONE). A close-delimited response never
 * ends here: the caller ends it when the origin closes. */
size_t hr_feed(hr_parser *p, const char *data, size_t n, int *ended);
/* One step of hr_feed: the bytes of data[0..n) that belong to the phase the parser is in (a
 * head, or part of a body), or (size_t)-1 when out of memory; p->phase and p->heads say what
 * came of them. With body (room for n bytes), *body_len body bytes are copied there: the step's
 * bytes in a Content-Length or close-delimited body, the chunk data alone in a chunked one.
 * The caller frees the parser (hr_free) when the phase is HR_DONE. */
size_t hr_step(hr_parser *p, const char *data, size_t n, char *body, size_t *body_len);

#endif
