/* The request-head parser (see http_head.h for why it is strict). */
#include "proxy/parse/http_head.h"

#include <string.h>

static int is_tchar(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
  return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Visible ASCII and blanks inside a field value; obs-text (>= 0x80) is let through as bytes,
 * control bytes (NUL, bare CR/LF among them) are not. */
static int is_value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

int ph_name_is(const ph_header *h, const char *name) {
  size_t n = strlen(name);
  if (h->name_len != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (lower((unsigned char)h->name[i]) != lower((unsigned char)name[i])) return 0;
  return 1;
}

const ph_header *ph_find(const ph_request *r, const char *name, int *count) {
  const ph_header *first = NULL;
  int n = 0;
  for (size_t i = 0; i < r->nheaders; i++) {
    if (!ph_name_is(&r->headers[i], name)) continue;
    if (!first) first = &r->headers[i];
    n++;
  }
  if (count) *count = n;
  return first;
}

/* The request line: METHOD SP target SP HTTP/1.d, exactly one space each. */
static ph_status request_line(const char *s, size_t n, ph_request *out) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)s[i])) i++;
  if (i == 0 || i > 32 || i >= n || s[i] != ' ') return PH_BAD;
  out->method = s;
  out->method_len = i;
  size_t t = ++i;
  while (i < n && (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f) i++;
  if (i == t || i >= n || s[i] != ' ') return PH_BAD;
  out->target = s + t;
  out->target_len = i - t;
  i++;
  if (n - i != 8 || memcmp(s + i, "HTTP/1.", 7) != 0) return n - i >= 5 && memcmp(s + i, "HTTP/", 5) == 0 ? PH_BAD_VERSION : PH_BAD;
  char d = s[i + 7];
  if (d != '0' && d != '1') return d >= '0' && d <= '9' ? PH_BAD_VERSION : PH_BAD;
  out->minor = d - '0';
  return PH_DONE;
}

static ph_status header_line(const char *s, size_t n, ph_header *h) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)s[i])) i++;
  if (i == 0 || i >= n || s[i] != ':') return PH_BAD; /* no blank before ':', no folding */
  h->name = s;
  h->name_len = i;
  i++;
  while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
  size_t end = n;
  while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t')) end--;
  for (size_t k = i; k < end; k++)
    if (!is_value_byte((unsigned char)s[k])) return PH_BAD;
  h->value = s + i;
  h->value_len = end - i;
  return PH_DONE;
}

ph_status ph_parse(const char *buf, size_t len, const ph_limits *lim, size_t *scanned, ph_request *out) {
  /* the end of the request line: a line over the limit is a 414 even before the head ends */
  const char *lf = memchr(buf, '\n', len);
  size_t line_end = lf ? (size_t)(lf - buf) : len;
  if (line_end > lim->max_line + 1) return PH_LINE_TOO_LONG;
  if (!lf) return PH_INCOMPLETE;
  if (line_end == 0 || buf[line_end - 1] != '\r') return PH_BAD;
  if (line_end - 1 > lim->max_line) return PH_LINE_TOO_LONG;
  /* find CRLFCRLF, resuming where the last call stopped */
  size_t from = *scanned > 3 ? *scanned - 3 : 0, head_len = 0;
  for (size_t i = from; i + 4 <= len; i++) {
    if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
      head_len = i + 4;
      break;
    }
  }
  /* the request line's own CRLF may be the start of the terminator (a head without headers) */
  if (!head_len && line_end + 3 <= len && memcmp(buf + line_end - 1, "\r\n\r\n", 4) == 0) head_len = line_end + 3;
  if (!head_len) {
    *scanned = len;
    return len > lim->max_head ? PH_HEAD_TOO_LARGE : PH_INCOMPLETE;
  }
  if (head_len > lim->max_head) return PH_HEAD_TOO_LARGE;
  memset(out, 0, sizeof *out);
  ph_status st = request_line(buf, line_end - 1, out);
  if (st != PH_DONE) return st;
  size_t max_headers = lim->max_headers < PH_MAX_HEADERS ? lim->max_headers : PH_MAX_HEADERS;
  size_t pos = line_end + 1;
  while (pos < head_len - 2) {
    const char *nl = memchr(buf + pos, '\n', head_len - pos);
    size_t e = (size_t)(nl - buf); /* always found: the head ends in CRLFCRLF */
    if (e == pos || buf[e - 1] != '\r') return PH_BAD;
    if (out->nheaders >= max_headers) return PH_HEAD_TOO_LARGE;
    if (memchr(buf + pos, '\r', e - 1 - pos)) return PH_BAD; /* a bare CR inside a line */
    st = header_line(buf + pos, e - 1 - pos, &out->headers[out->nheaders]);
    if (st != PH_DONE) return st;
    out->nheaders++;
    pos = e + 1;
  }
  out->head_len = head_len;
  return PH_DONE;
}

static int parse_port(const char *s, size_t n, int *port) {
  if (n == 0 || n > 5 || s[0] == '0') return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < 1 || v > 65535) return -1;
  *port = v;
  return 0;
}

/* host[:port] with no userinfo, no IPv6 literal (the policy has none) and no empty host */
static int split_authority(const char *a, size_t n, char *host_out, int *port, int need_port) {
  if (n == 0 || memchr(a, '@', n) || memchr(a, '[', n)) return -1;
  const char *colon = memchr(a, ':', n);
  size_t hl = colon ? (size_t)(colon - a) : n;
  if (hl == 0 || hl > 253) return -1;
  if (colon) {
    if (parse_port(colon + 1, n - hl - 1, port) != 0) return -1;
  } else if (need_port) {
    return -1;
  }
  memcpy(host_out, a, hl);
  host_out[hl] = '\0';
  return 0;
}

int ph_authority(const char *t, size_t len, char *host_out, int *port) {
  return split_authority(t, len, host_out, port, 1);
}

int ph_absolute_split(const char *t, size_t len, const char *scheme, const char **auth, size_t *auth_len,
                      const char **path, size_t *path_len) {
  size_t sl = strlen(scheme);
  if (len < sl) return -1;
  for (size_t i = 0; i < sl; i++)
    if (lower((unsigned char)t[i]) != scheme[i]) return -1;
  const char *a = t + sl;
  size_t rest = len - sl, al = 0;
  while (al < rest && a[al] != '/' && a[al] != '?' && a[al] != '#') al++;
  if (al < rest && a[al] == '#') return -1;
  if (al == rest) {
    *path = "/";
    *path_len = 1;
  } else if (a[al] == '?') {
    return -1; /* "http://host?q": no path to check; clients always send a '/' */
  } else {
    *path = a + al;
    *path_len = rest - al;
    if (memchr(*path, '#', *path_len)) return -1;
  }
  *auth = a;
  *auth_len = al;
  return 0;
}

int ph_absolute(const char *t, size_t len, char *host_out, int *port, const char **path, size_t *path_len) {
  const char *a;
  size_t al;
  if (ph_absolute_split(t, len, "http://", &a, &al, path, path_len) != 0) return -1;
  *port = 80;
  return split_authority(a, al, host_out, port, 0);
}

int ph_content_length(const ph_request *r, unsigned long long *len) {
  int count = 0;
  const ph_header *h = ph_find(r, "content-length", &count);
  *len = 0;
  if (count == 0) return 0;
  if (count > 1 || h->value_len == 0 || h->value_len > 15) return -1;
  unsigned long long v = 0;
  for (size_t i = 0; i < h->value_len; i++) {
    if (h->value[i] < '0' || h->value[i] > '9') return -1;
    v = v * 10 + (unsigned)(h->value[i] - '0');
  }
  *len = v;
  return 1;
}

/* ---- the fields a re-sent head leaves out ---- */

static int named_any(const ph_header *h, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (ph_name_is(h, names[i])) return 1;
  return 0;
}

int ph_hop_by_hop(const ph_header *h) {
  static const char *const names[] = {"host",       "proxy-authorization", "proxy-connection", "connection",
                                      "keep-alive", "te",                  "trailer",          "upgrade",
                                      "transfer-encoding"};
  return named_any(h, names, sizeof names / sizeof names[0]);
}

int ph_override(const ph_header *h) {
  static const char *const names[] = {"x-http-method-override", "x-http-method", "x-method-override", "x-original-url",
                                      "x-rewrite-url"};
  return named_any(h, names, sizeof names / sizeof names[0]);
}

int ph_any_override(const ph_request *r) {
  for (size_t i = 0; i < r->nheaders; i++)
    if (ph_override(&r->headers[i])) return 1;
  return 0;
}

int ph_carries(const ph_header *h, const char *secret, size_t sl) {
  return sl > 0 && ((h->value_len >= sl && memmem(h->value, h->value_len, secret, sl) != NULL) ||
                    (h->name_len >= sl && memmem(h->name, h->name_len, secret, sl) != NULL));
}

int ph_dropped(const ph_header *h, const char *token, size_t token_len) {
  return ph_hop_by_hop(h) || ph_override(h) || ph_carries(h, token, token_len);
}

/* ---- the host a request names ---- */

ph_host_match ph_authority_names(const char *a, size_t len, const char *host, int port, int default_port) {
  char named[256];
  int named_port = default_port;
  if (split_authority(a, len, named, &named_port, 0) != 0) return PH_HOST_BAD;
  size_t nl = strlen(named), hl = strlen(host);
  if (nl > 1 && named[nl - 1] == '.') nl--; /* the absolute DNS name: the same host */
  if (nl != hl || named_port != port) return PH_HOST_OTHER;
  for (size_t i = 0; i < nl; i++)
    if (lower((unsigned char)named[i]) != (unsigned char)host[i]) return PH_HOST_OTHER;
  return PH_HOST_SAME;
}

int ph_host_refusal(const ph_request *r, const char *auth, size_t auth_len, const char *host, int port,
                    int default_port, const char **why) {
  int n = 0;
  const ph_header *h = ph_find(r, "host", &n);
  if (n > 1) return *why = "the request has more than one Host header", 400;
  ph_host_match m = h ? ph_authority_names(h->value, h->value_len, host, port, default_port) : PH_HOST_SAME;
  if (m == PH_HOST_BAD) return *why = "the Host header is not host[:port]", 400;
  if (m == PH_HOST_OTHER)
    return *why = "the Host header names another host or port than the one this request was admitted for", 421;
  m = auth ? ph_authority_names(auth, auth_len, host, port, default_port) : PH_HOST_SAME;
  if (m == PH_HOST_BAD) return *why = "the request target's authority is not host[:port]", 400;
  if (m == PH_HOST_OTHER)
    return *why = "the request target names another host or port than the one this connection was admitted for", 421;
  return 0;
}
