#ifndef SANDSTACK_PROXY_HTTP_HEAD_H
#define SANDSTACK_PROXY_HTTP_HEAD_H
/* The HTTP/1.x request head as the proxy reads it: a pure parser over the bytes received so far
 * (no allocation, no I/O), so the fuzz target links exactly what the proxy runs. Strict by
 * design: anything two HTTP implementations could read differently (bare CR or LF, whitespace
 * before a colon, folded lines, two Content-Lengths) is a 400, because the proxy decides on
 * what it read and the upstream acts on what it reads. */
#include <stddef.h>

#define PH_MAX_HEADERS 100

typedef struct ph_header {
  const char *name, *value; /* point into the caller's buffer; value without surrounding blanks */
  size_t name_len, value_len;
} ph_header;

typedef struct ph_request {
  const char *method, *target;
  size_t method_len, target_len;
  int minor;          /* HTTP/1.minor */
  size_t head_len;    /* bytes of the head, the final empty line included */
  size_t nheaders;
  ph_header headers[PH_MAX_HEADERS];
} ph_request;

typedef struct ph_limits {
  size_t max_line;    /* request line, CRLF excluded: over it -> PH_LINE_TOO_LONG (414) */
  size_t max_head;    /* whole head: over it -> PH_HEAD_TOO_LARGE (431) */
  size_t max_headers; /* header count (at most PH_MAX_HEADERS): over it -> PH_HEAD_TOO_LARGE */
} ph_limits;

typedef enum {
  PH_INCOMPLETE = 0,  /* no complete head yet, and no limit exceeded */
  PH_DONE,            /* *out describes the head in buf[0..head_len) */
  PH_BAD,             /* malformed (400) */
  PH_LINE_TOO_LONG,   /* 414 */
  PH_HEAD_TOO_LARGE,  /* 431 */
  PH_BAD_VERSION,     /* not HTTP/1.0 or 1.1 (505) */
} ph_status;

/* Parses buf[0..len). *scanned carries the search position between calls on a growing buffer
 * (start at 0), so a head trickled in byte by byte is scanned once, not once per byte. */
ph_status ph_parse(const char *buf, size_t len, const ph_limits *lim, size_t *scanned, ph_request *out);

/* The header's value (case-insensitive name), NULL when absent; *count = occurrences. */
const ph_header *ph_find(const ph_request *r, const char *name, int *count);
int ph_name_is(const ph_header *h, const char *name);

/* Targets. host_out has room for 254 bytes (NUL included); the host is checked by the policy's
 * normalizer later, here only split off. Returns 0 or -1 when the target is not of that form. */
/* authority-form "host:port" (CONNECT): the port is required. */
int ph_authority(const char *t, size_t len, char *host_out, int *port);
/* absolute-form "http://host[:port][/path][?query]": *path points into t (or is "/" when empty). */
int ph_absolute(const char *t, size_t len, char *host_out, int *port, const char **path, size_t *path_len);

/* Content-Length: 0 none (*len = 0), 1 present (*len set), -1 malformed or repeated. */
int ph_content_length(const ph_request *r, unsigned long long *len);

#endif
