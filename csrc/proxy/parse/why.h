#ifndef SANDSTACK_PROXY_WHY_H
#define SANDSTACK_PROXY_WHY_H
/* The proxy's start-up checks (config.c, credentials.c) refuse with a reason written into the
 * caller's buffer, never containing a secret. */
#include <stddef.h>

/* printf-style into why (n bytes, always terminated); returns -1, so a check can
 * `return why_fail(...)`. */
int why_fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
