/* Address classification (see addr.h). */
#include "proxy/addr.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *v4_range(uint32_t a) {
  static const struct {
    uint32_t net;
    int bits;
    const char *name;
  } ranges[] = {
      {0x00000000u, 8, "this_network"},  /* 0.0.0.0/8 */
      {0x0a000000u, 8, "private"},       /* 10/8 */
      {0x64400000u, 10, "shared"},       /* 100.64/10 (carrier-grade NAT) */
      {0x7f000000u, 8, "loopback"},      /* 127/8 */
      {0xa9fe0000u, 16, "link_local"},   /* 169.254/16: the cloud metadata address */
      {0xac100000u, 12, "private"},      /* 172.16/12: Docker's default bridges */
      {0xc0000000u, 24, "reserved"},     /* 192.0.0/24: IETF protocol assignments */
      {0xc0a80000u, 16, "private"},      /* 192.168/16 */
      {0xc6120000u, 15, "reserved"},     /* 198.18/15: benchmarking, used by some NAT64 setups */
      {0xe0000000u, 4, "multicast"},     /* 224/4 */
      {0xf0000000u, 4, "reserved"},      /* 240/4 and the broadcast address */
  };
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    uint32_t mask = ranges[i].bits ? ~0u << (32 - ranges[i].bits) : 0;
    if ((a & mask) == ranges[i].net) return ranges[i].name;
  }
  return NULL;
}

static const char *v6_range(const uint8_t *b) {
  static const uint8_t zero[16];
  if (memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1)) return b[15] ? "loopback" : "unspecified";
  /* IPv4-mapped ::ffff:a.b.c.d and NAT64 64:ff9b::a.b.c.d reach the IPv4 address they carry */
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0 || memcmp(b, zero, 12) == 0) {
    uint32_t v4 = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
    const char *r = v4_range(v4);
    return r ? r : (memcmp(b, zero, 12) == 0 ? "reserved" : NULL); /* ::a.b.c.d is deprecated */
  }
  if ((b[0] & 0xfe) == 0xfc) return "unique_local";             /* fc00::/7 */
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link_local"; /* fe80::/10 */
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "private";    /* fec0::/10, site-local */
  if (b[0] == 0xff) return "multicast";
  if (b[0] == 0x20 && b[1] == 0x02) { /* 6to4 2002:a.b.c.d::/48 carries an IPv4 address too */
    uint32_t v4 = (uint32_t)b[2] << 24 | (uint32_t)b[3] << 16 | (uint32_t)b[4] << 8 | b[5];
    return v4_range(v4);
  }
  return NULL;
}

const char *addr_refused_range(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) return v4_range(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
  if (sa->sa_family == AF_INET6) return v6_range(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
  return "reserved";
}

void addr_text(const struct sockaddr *sa, char *out, size_t cap) {
  const void *a = sa->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                                           : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
  if (!inet_ntop(sa->sa_family, a, out, (socklen_t)cap)) snprintf(out, cap, "?");
}
