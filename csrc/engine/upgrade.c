#include "engine/upgrade.h"

#include <string.h>
#include <strings.h>

/* The end of the head: the first CRLF CRLF (a bare LF LF is accepted too, as Go's client does). */
static size_t head_end(const char *p, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (p[i] != '\n') continue;
    if (p[i + 1] == '\n') return i + 2;
    if (i + 2 < n && p[i + 1] == '\r' && p[i + 2] == '\n') return i + 3;
  }
  return 0;
}

static int digit(char c) { return c >= '0' && c <= '9'; }

static int parse_status(const char *p, size_t n, long *status) {
  /* HTTP/1.x SP DDD [SP reason] */
  if (n < 12 || memcmp(p, "HTTP/1.", 7) != 0 || !digit(p[7]) || p[8] != ' ') return -1;
  if (!digit(p[9]) || !digit(p[10]) || !digit(p[11]) || p[9] == '0') return -1;
  if (n > 12 && p[12] != ' ' && p[12] != '\r' && p[12] != '\n') return -1;
  *status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
  return 0;
}

static int parse_length(const char *v, size_t n, long long *out) {
  while (n && (*v == ' ' || *v == '\t')) v++, n--;
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r')) n--;
  if (n == 0 || n > 15) return -1;
  long long x = 0;
  for (size_t i = 0; i < n; i++) {
    if (!digit(v[i])) return -1;
    x = x * 10 + (v[i] - '0');
  }
  *out = x;
  return 0;
}

int sse_upgrade_parse(const char *p, size_t n, sse_upgrade_head *out) {
  size_t end = head_end(p, n);
  if (end == 0) return n >= 7 && memcmp(p, "HTTP/1.", 7) != 0 ? -1 : 0;
  memset(out, 0, sizeof *out);
  out->content_length = -1;
  out->head_len = end;
  const char *line = p;
  const char *stop = p + end;
  const char *nl = memchr(line, '\n', (size_t)(stop - line));
  if (parse_status(line, (size_t)(nl - line), &out->status) != 0) return -1;
  static const char cl[] = "content-length:";
  for (line = nl + 1; line < stop; line = nl + 1) {
    nl = memchr(line, '\n', (size_t)(stop - line));
    size_t len = (size_t)(nl - line);
    if (len && line[len - 1] == '\r') len--;
    if (len == 0) break; /* the blank line */
    if (!memchr(line, ':', len)) return -1;
    if (len >= sizeof cl - 1 && strncasecmp(line, cl, sizeof cl - 1) == 0 &&
        parse_length(line + sizeof cl - 1, len - (sizeof cl - 1), &out->content_length) != 0)
      return -1;
  }
  return 1;
}
