#ifndef SANDSTACK_PROXY_CURL_LOOP_H
#define SANDSTACK_PROXY_CURL_LOOP_H
/* libcurl's multi-socket API driven by the proxy's libuv loop (curl_loop.c). */
#include <curl/curl.h>
#include <uv.h>

typedef struct curl_loop curl_loop;

curl_loop *curl_loop_new(uv_loop_t *loop, void (*done)(CURL *easy, CURLcode rc));
CURLM *curl_loop_multi(curl_loop *cl);
void curl_loop_close(curl_loop *cl);

#endif
