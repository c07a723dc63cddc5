/* Carving small subnets out of a user-given pool: the engine's default pools hold about 31
 * bridge networks, so 100 three-network stacks need /28s from a range the user owns. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack/stack.h"

static int parse_cidr(const char *s, uint32_t *addr, int *prefix) {
  char buf[64];
  const char *slash = strchr(s, '/');
  if (!slash || (size_t)(slash - s) >= sizeof buf) return -1;
  memcpy(buf, s, (size_t)(slash - s));
  buf[slash - s] = '\0';
  struct in_addr a;
  if (inet_pton(AF_INET, buf, &a) != 1) return -1;
  char *end = NULL;
  long p = strtol(slash + 1, &end, 10);
  if (end == slash + 1 || *end != '\0' || p < 0 || p > 32) return -1;
  *prefix = (int)p;
  uint32_t mask = p == 0 ? 0 : 0xffffffffu << (32 - p);
  *addr = ntohl(a.s_addr) & mask;
  return 0;
}

static int overlaps(uint32_t a, int pa, uint32_t b, int pb) {
  int p = pa < pb ? pa : pb;
  uint32_t mask = p == 0 ? 0 : 0xffffffffu << (32 - p);
  return (a & mask) == (b & mask);
}

int ss_stack_pick_subnet(const char *pool, int prefix, const char *const *used, size_t n,
                         uint32_t seed, char *out, size_t outsz, ss_error *err) {
  uint32_t base;
  int pp;
  if (!pool || parse_cidr(pool, &base, &pp) != 0 || prefix < 8 || prefix > 30 || pp > prefix) {
    ss_error_set(err, "compose", "invalid_option",
                 "subnet_pool '%s' must be an IPv4 CIDR no smaller than /%d", pool ? pool : "",
                 prefix);
    ss_error_field_str(err, "option", "subnet_pool");
    return -1;
  }
  uint64_t slots = (uint64_t)1 << (prefix - pp);
  uint32_t step = (uint32_t)1 << (32 - prefix);
  for (uint64_t k = 0; k < slots; k++) {
    uint32_t cand = base + (uint32_t)(((seed + k) % slots) * step);
    int clash = 0;
    for (size_t i = 0; i < n && !clash; i++) {
      uint32_t ua;
      int up;
      if (used[i] && parse_cidr(used[i], &ua, &up) == 0) clash = overlaps(cand, prefix, ua, up);
    }
    if (clash) continue;
    snprintf(out, outsz, "%u.%u.%u.%u/%d", cand >> 24, (cand >> 16) & 255, (cand >> 8) & 255,
             cand & 255, prefix);
    return 0;
  }
  ss_error_set(err, "engine", "pool_exhausted",
               "subnet_pool %s has no free /%d left: remove stale stacks (sandstack reap) or give a "
               "larger pool", pool, prefix);
  ss_error_field_str(err, "option", "subnet_pool");
  return -1;
}

int ss_stack_api_number(const char *v) {
  if (!v) return -1;
  char *end = NULL;
  long major = strtol(v, &end, 10);
  if (end == v || *end != '.') return -1;
  const char *m = end + 1;
  long minor = strtol(m, &end, 10);
  if (end == m || major < 0 || minor < 0 || minor > 99 || major > 99) return -1;
  return (int)(major * 100 + minor);
}
