/* Address classification (see address.h). */
#include "policy/address.h"

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

static uint32_t v4_at(const uint8_t *b) { return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]; }

static int zero(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* The local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215) is cut by its operator into a /48, /56,
 * /64 or /96 translation prefix, and RFC 6052 puts the IPv4 address at a different place for
 * each (skipping bits 64-71, which are zero). The address does not say which: every layout it
 * fits (bits 64-71 zero, the suffix after the IPv4 address zero) is judged, and the first
 * refused IPv4 address among them refuses it. */
static const char *local_nat64(const uint8_t *b) {
  static const struct {
    uint8_t at[4]; /* where the four IPv4 bytes are */
    uint8_t suffix; /* first byte of the zero suffix (16: none) */
  } layouts[] = {
      {{6, 7, 9, 10}, 11}, /* /48 */
      {{7, 9, 10, 11}, 12}, /* /56 */
      {{9, 10, 11, 12}, 13}, /* /64 */
      {{12, 13, 14, 15}, 16}, /* /96 */
  };
  if (b[8] != 0) return "reserved"; /* no RFC 6052 address: not a translator's */
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    if (!zero(b + layouts[i].suffix, 16 - layouts[i].suffix)) continue;
    const uint8_t *a = layouts[i].at;
    const uint8_t v4[4] = {b[a[0]], b[a[1]], b[a[2]], b[a[3]]};
    const char *r = v4_range(v4_at(v4));
    if (r) return r;
  }
  return NULL;
}

/* IPv6 forms that carry an IPv4 address reach (through a translator, a tunnel or the host's own
 * stack) that IPv4 address, so each is judged as the IPv4 address it carries. */
static const char *v6_range(const uint8_t *b) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};       /* ::ffff:a.b.c.d */
  static const uint8_t siit[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};         /* ::ffff:0:a.b.c.d */
  static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};     /* 64:ff9b::/96 */
  static const uint8_t local64[6] = {0, 0x64, 0xff, 0x9b, 0, 0x01};                   /* 64:ff9b:1::/48 */
  static const uint8_t teredo[4] = {0x20, 0x01, 0, 0};                                /* 2001::/32 */
  if (zero(b, 15) && (b[15] == 0 || b[15] == 1)) return b[15] ? "loopback" : "unspecified";
  if (memcmp(b, mapped, 12) == 0 || memcmp(b, siit, 12) == 0 || memcmp(b, nat64, 12) == 0)
    return v4_range(v4_at(b + 12));
  if (zero(b, 12)) { /* IPv4-compatible ::a.b.c.d, deprecated (RFC 4291): refused whatever it carries */
    const char *r = v4_range(v4_at(b + 12));
    return r ? r : "reserved";
  }
  if (memcmp(b, local64, 6) == 0) return local_nat64(b);
  if (b[0] == 0x20 && b[1] == 0x02) return v4_range(v4_at(b + 2)); /* 6to4 2002:a.b.c.d::/48 */
  if (memcmp(b, teredo, 4) == 0) { /* Teredo (RFC 4380): the server, and the client inverted */
    const char *r = v4_range(v4_at(b + 4));
    if (r) return r;
    return v4_range(~v4_at(b + 12));
  }
  if ((b[0] & 0xfe) == 0xfc) return "unique_local";             /* fc00::/7 */
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link_local"; /* fe80::/10 */
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "private";    /* fec0::/10, site-local */
  if (b[0] == 0xff) return "multicast";
  return NULL;
}

const char *ss_address_range(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) return v4_range(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
  if (sa->sa_family == AF_INET6) return v6_range(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
  return "reserved";
}

void ss_address_text(const struct sockaddr *sa, char *out, size_t cap) {
  const void *a = sa->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                                           : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
  if (!inet_ntop(sa->sa_family, a, out, (socklen_t)cap)) snprintf(out, cap, "?");
}

int ss_address_parse(const char *text, struct sockaddr_storage *out) {
  memset(out, 0, sizeof *out);
  struct sockaddr_in *v4 = (struct sockaddr_in *)out;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
  if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) v4->sin_family = AF_INET;
  else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) v6->sin6_family = AF_INET6;
  else return -1;
  /* one spelling per address, so that what a policy names compares equal to what the proxy
     resolved (ss_address_text): not "::FFFF:a.b.c.d", "fd00:0::1" or a zone */
  char canon[INET6_ADDRSTRLEN];
  ss_address_text((const struct sockaddr *)out, canon, sizeof canon);
  return strcmp(canon, text) == 0 ? 0 : -1;
}
