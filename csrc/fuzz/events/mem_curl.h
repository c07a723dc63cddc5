/* A scripted libcurl for csrc/fuzz/fuzz_proxy_events.c, beside mem_uv.c: the easy and multi
 * functions the proxy's credential route (credential.c, curl_loop.c, tls.c) calls, with no
 * network. The fuzzer plays the upstream: each action it queues is performed inside the next
 * curl_multi_socket_action, the way real libcurl calls the proxy back from there: curl pulls
 * request body bytes (read callback), delivers a status line, header lines, the end of the
 * head, body bytes (header and write callbacks), or ends the transfer (a DONE message).
 *
 * Modelled as libcurl 7.88 behaves: callbacks only from inside socket_action or, for held body
 * bytes, inside curl_easy_pause when receiving is unpaused; CURL_WRITEFUNC_PAUSE holds the
 * chunk for later; CURL_READFUNC_PAUSE stops pulling until curl_easy_pause unpauses sending;
 * a callback returning less than it was given fails the transfer; the header list is read
 * when the transfer starts (so it must still be alive then). Removing or cleaning up a handle
 * from inside its own callback (which libcurl refuses) aborts. */
#ifndef SANDSTACK_FUZZ_MEM_CURL_H
#define SANDSTACK_FUZZ_MEM_CURL_H

#include <curl/curl.h>
#include <stddef.h>

typedef enum {
  MC_PULL,        /* curl wants up to n request body bytes */
  MC_STATUS,      /* a status line: 200, 404, 500, or 100 (interim) by n */
  MC_HEADER,      /* a header line (n picks which) */
  MC_END_HEADERS, /* the empty line ending a head */
  MC_BODY,        /* n response body bytes */
  MC_DONE_OK,     /* the transfer completed */
  MC_DONE_ERROR,  /* the transfer failed (connection reset), before or after the head */
  MC_DONE_TIMEOUT /* the transfer timed out */
} mc_action;

/* The request as the transfer started it (for the driver's checks). */
typedef struct mc_request {
  const char *url;
  const struct curl_slist *headers;
  const char *custom; /* CURLOPT_CUSTOMREQUEST, NULL when none */
  int post, nobody;
  long long postsize; /* -1 when not set */
} mc_request;

typedef struct mc_hooks {
  void *ctx;
  void (*started)(void *ctx, const mc_request *req); /* the transfer starts: its head goes out */
  void (*body)(void *ctx, const char *data, size_t n); /* request body bytes curl took */
} mc_hooks;

void mc_set_hooks(CURLM *multi, const mc_hooks *hooks);
/* Queues one action for the next socket_action and asks the proxy's timer for it at once (the
 * harness then fires that timer); 0 when no transfer is active. */
int mc_queue(CURLM *multi, mc_action action, size_t n);
/* Transfers added and not removed. */
int mc_active(CURLM *multi);

#endif
