#ifndef SANDSTACK_ENGINE_ERRMSG_H
#define SANDSTACK_ENGINE_ERRMSG_H
/* The daemon's message from an error body. Docker answers {"message": "..."}, but some paths
 * (the "client version is too old" check on 20.10, proxies, a fake) answer text/plain or
 * garbage, so anything is tolerated: a JSON "message" string when there is one, else the body
 * as text with control bytes replaced and whitespace trimmed. Always NUL-terminates out
 * (outsz >= 1) and returns the length written. Pure: fuzzable. */
#include <stddef.h>

size_t sse_error_message(const char *body, size_t len, char *out, size_t outsz);

#endif
