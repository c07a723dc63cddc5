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

/* The absolute-form target split at its authority: t starts with scheme ("http://", any case);
 * *auth, *path point into t (*path is "/" when empty). -1 when not of that form, when there is
 * no path before a '?', or with a fragment. The authority is not checked here. */
int ph_absolute_split(const char *t, size_t len, const char *scheme, const char **auth, size_t *auth_len,
                      const char **path, size_t *path_len);

/* ---- what the proxy sends on: every route that re-sends a client's head uses these ---- */

/* Hop-by-hop fields and the proxy's own (Host is written by the proxy from what it admitted). */
int ph_hop_by_hop(const ph_header *h);
/* Method and URL override fields (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override,
 * X-Original-URL, X-Rewrite-URL): an origin or framework that obeys them acts on a method or
 * path the policy never checked. */
int ph_override(const ph_header *h);
/* Whether any header of r is one ph_override names (the audit line's "override_header_stripped"). */
int ph_any_override(const ph_request *r);
/* The secret anywhere in the field's name or value ("X-<token>: 1" carries it as well). */
int ph_carries(const ph_header *h, const char *secret, size_t secret_len);
/* Any of the three: the client's fields a re-sent head leaves out. */
int ph_dropped(const ph_header *h, const char *token, size_t token_len);

/* ---- whether the request names the host it was admitted for ---- */

/* An authority "host[:port]" against the admitted host (canonical: lowercase, no trailing dot,
 * as ss_host_normalize makes it) and port; default_port stands for an absent port. The host
 * compares without case and without one trailing dot (DNS reads "a.test." as "a.test").
 * PH_HOST_BAD: not host[:port] (userinfo, IPv6 literal, empty, a port with a leading zero). */
typedef enum { PH_HOST_SAME = 0, PH_HOST_BAD, PH_HOST_OTHER } ph_host_match;
ph_host_match ph_authority_names(const char *a, size_t len, const char *host, int port, int default_port);
/* The request's Host field and, when auth is not NULL, its absolute-form authority, against
 * host:port. 0 when both name it (no Host field is fine: the proxy writes the admitted one),
 * else the status to answer, *why saying why: 400 for a repeated or malformed Host (RFC 9112
 * 3.2), 421 Misdirected Request for another host or port. */
int ph_host_refusal(const ph_request *r, const char *auth, size_t auth_len, const char *host, int port,
                    int default_port, const char **why);

#endif
