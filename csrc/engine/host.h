#ifndef SANDSTACK_ENGINE_HOST_H
#define SANDSTACK_ENGINE_HOST_H
/* DOCKER_HOST-style addresses -> what libcurl needs: unix:///path (a socket path plus a dummy
 * http://localhost base, the Host header Go's server wants), tcp://host[:port] (http, or
 * https when TLS is on; default port 2375, 2376 with TLS), http:// and https:// as given.
 * ssh:// and npipe:// cannot be spoken by libcurl and are refused. Pure. */
#include "util/error.h"

typedef struct sse_host {
  char base[512];       /* scheme://authority, no trailing slash */
  char unix_path[108];  /* sun_path limit on Linux; "" for tcp */
} sse_host;

/* 0, or -1 with err kind "invalid" reason "bad_host". */
int sse_host_parse(const char *host, int tls, sse_host *out, ss_error *err);

#endif
