#include "util/url.h"

#include <string.h>

int ss_url_unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

int ss_url_pchar(unsigned char c) { return ss_url_unreserved(c) || (c && strchr("!$&'()*+,;=:@", c)); }

static size_t encode(char *out, const char *s, size_t n, int (*keep)(unsigned char)) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (keep(c)) {
      out[o++] = (char)c;
    } else {
      out[o++] = '%';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  return o;
}

size_t ss_urlencode(char *out, const char *s, size_t n) { return encode(out, s, n, ss_url_unreserved); }

size_t ss_urlencode_segment(char *out, const char *s, size_t n) { return encode(out, s, n, ss_url_pchar); }
