#include "engine/host.h"

#include <stdio.h>
#include <string.h>

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static int bad(ss_error *err, const char *host, const char *why) {
  ss_error_set(err, "invalid", "bad_host", "engine host '%.200s': %s", host, why);
  return -1;
}

int sse_host_parse(const char *host, int tls, sse_host *out, ss_error *err) {
  memset(out, 0, sizeof *out);
  if (!host || !*host) return bad(err, "", "empty");
  if (starts(host, "unix://")) {
    const char *path = host + strlen("unix://");
    if (*path != '/') return bad(err, host, "the socket path must be absolute");
    if (strlen(path) >= sizeof out->unix_path) return bad(err, host, "socket path longer than 107 bytes");
    snprintf(out->unix_path, sizeof out->unix_path, "%s", path);
    snprintf(out->base, sizeof out->base, "http://localhost");
    return 0;
  }
  const char *scheme, *rest;
  if (starts(host, "tcp://")) {
    scheme = tls ? "https" : "http";
    rest = host + strlen("tcp://");
  } else if (starts(host, "http://")) {
    scheme = "http";
    rest = host + strlen("http://");
  } else if (starts(host, "https://")) {
    scheme = "https";
    rest = host + strlen("https://");
  } else {
    return bad(err, host, "only unix://, tcp://, http:// and https:// are supported");
  }
  size_t n = strcspn(rest, "/?#");
  if (n == 0) return bad(err, host, "no host name");
  if (rest[n] == '/' && rest[n + 1] != '\0') return bad(err, host, "a path is not supported");
  if (rest[n] == '?' || rest[n] == '#') return bad(err, host, "a query is not supported");
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)rest[i] <= ' ' || rest[i] == '@') return bad(err, host, "bad character in the address");
  /* A port is present when the authority ends in :digits (an IPv6 literal ends in ']'). */
  const char *colon = memchr(rest, ':', n);
  const char *close = memchr(rest, ']', n);
  int has_port = colon && (!close || strrchr(rest, ':') > close);
  if (rest[0] == '[' && !close) return bad(err, host, "unterminated IPv6 literal");
  int w = snprintf(out->base, sizeof out->base, "%s://%.*s%s", scheme, (int)n, rest,
                   has_port ? "" : (strcmp(scheme, "https") == 0 ? ":2376" : ":2375"));
  if (w < 0 || (size_t)w >= sizeof out->base) return bad(err, host, "too long");
  return 0;
}
