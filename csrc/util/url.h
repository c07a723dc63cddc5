#ifndef SANDSTACK_UTIL_URL_H
#define SANDSTACK_UTIL_URL_H
/* Percent-encoding of a URL's parts (RFC 3986): the unreserved bytes [A-Za-z0-9-._~] stay as
 * they are, every other byte becomes %XX (upper-case hex). The one encoder of the engine
 * client's paths and queries and of the proxy's placed credentials. Depends on nothing. */
#include <stddef.h>

int ss_url_unreserved(unsigned char c);
/* Writes the n bytes at s encoded into out, which has room for 3 * n bytes; returns the
 * length written (no NUL is added). */
size_t ss_urlencode(char *out, const char *s, size_t n);

/* pchar less pct-encoded (RFC 3986 section 3.3): what one path segment holds as it is, the
 * unreserved bytes and the sub-delims, ':' and '@'. */
int ss_url_pchar(unsigned char c);
/* As ss_urlencode, for one path segment: pchar bytes stay ('/', '?', '#' and '%' do not). */
size_t ss_urlencode_segment(char *out, const char *s, size_t n);

#endif
