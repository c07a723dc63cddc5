#ifndef SANDSTACK_PROXY_CURL_LOOP_H
#define SANDSTACK_PROXY_CURL_LOOP_H
/* libcurl's multi-socket API driven by the proxy's libuv loop (curl_loop.c). */
#include <curl/curl.h>
#include <uv.h>

typedef struct curl_loop curl_loop;

/* A transfer's own completion: whoever adds an easy handle to the multi sets its CURLOPT_PRIVATE
 * to a struct that starts with a curl_loop_transfer, and is called back through it when the
 * transfer ends (the loop knows no route). */
typedef struct curl_loop_transfer curl_loop_transfer;
struct curl_loop_transfer {
  void (*done)(curl_loop_transfer *t, CURL *easy, CURLcode rc);
};

curl_loop *curl_loop_new(uv_loop_t *loop);
CURLM *curl_loop_multi(curl_loop *cl);
void curl_loop_close(curl_loop *cl);

#endif
