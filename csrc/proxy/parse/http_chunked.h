#ifndef SANDSTACK_PROXY_HTTP_CHUNKED_H
#define SANDSTACK_PROXY_HTTP_CHUNKED_H
/* The chunked transfer coding (RFC 9112 7.1), validated as a stream: the proxy forwards a
 * chunked body byte for byte, and must know exactly where it ends, because what follows is the
 * next request (or response) and is checked on its own. Pure (no allocation, no I/O), so the
 * fuzz target csrc/fuzz/fuzz_proxy_chunked.c links exactly what the proxy runs.
 *
 * Strict, because the proxy and the origin must agree on where the body ends (request
 * smuggling lives in the difference): CRLF only (a bare CR or LF is an error), the size is
 * 1 to 15 hex digits and nothing else (no blank before it, no sign, no "0x"; 15 digits cannot
 * overflow 64 bits), a chunk extension is ';' then visible ASCII or blanks up to the line's
 * end, a chunk's data must be followed by CRLF exactly. Trailer fields: a request's must be
 * empty (HC_REQUEST: the proxy checks a request's fields before it sends any, and a trailer
 * would arrive after); a response's are passed on, each line checked for CRLF only. */
#include <stddef.h>

#define HC_MAX_SIZE_DIGITS 15
#define HC_MAX_LINE 4096 /* a size line with its extension, or one trailer line */

typedef enum { HC_REQUEST, HC_RESPONSE } hc_mode;
typedef enum { HC_MORE = 0, HC_END, HC_BAD } hc_result;

typedef struct hc_decoder {
  hc_mode mode;
  int state;                /* where in the grammar (http_chunked.c) */
  unsigned long long left;  /* data bytes left in the current chunk */
  size_t line;              /* bytes in the current size or trailer line */
  int digits;               /* hex digits in the current size */
  const char *why;          /* HC_BAD: what was wrong */
} hc_decoder;

void hc_init(hc_decoder *d, hc_mode mode);
/* Reads data[0..n) as the next bytes of the body. Returns how many belong to it (all of them
 * while HC_MORE; up to and including the last CRLF on HC_END; the valid prefix on HC_BAD), and
 * the result in *res. After HC_END or HC_BAD it consumes nothing. */
size_t hc_feed(hc_decoder *d, const char *data, size_t n, hc_result *res);
/* hc_feed, and the chunk data among those bytes (the body without its framing) copied to out,
 * which has room for n bytes: *out_len of them. What scans a body for secrets or placeholders
 * reads this, never the framing, so a chunk boundary cannot split what it looks for. */
size_t hc_feed_data(hc_decoder *d, const char *data, size_t n, hc_result *res, char *out, size_t *out_len);

#endif
