#ifndef SANDSTACK_PROXY_CONTROL_REQUEST_H
#define SANDSTACK_PROXY_CONTROL_REQUEST_H
/* A control request read whole, answered (control_request.c). */
#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct proxy_server proxy_server;

/* {"ok": false, "error": error, "message": message} */
cJSON *control_refusal(const char *error, const char *message);
/* The request (len bytes, any bytes at all): one command {"verb": ..., "payload": ...}, or an
 * array of them run in order up to the first refusal (a warm-pool claim hands over policy,
 * credentials and model key in one round), answered {"ok": all ok, "answers": [one per command
 * run]}. The answer is the caller's to free; every answer has a boolean "ok". */
cJSON *control_request_answer(proxy_server *s, const char *data, size_t len);

#endif
