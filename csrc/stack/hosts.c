/* Per-container host names (the engine's HostConfig.ExtraHosts): `hosts = {["name"] = "address"}`
 * on a service and `proxy_hosts` for the proxy sandstack adds. They let a sidecar resolve names
 * no DNS server knows (a private registry, a test stand-in); each becomes a line of the
 * container's /etc/hosts. Both parts are held to their shape here, because the engine would
 * write whatever it is given into that file: a name with a space or a newline would add names
 * nobody asked for. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack/model.h"

#define HOSTNAME_MAX 253
#define LABEL_MAX 63
#define HOSTS_MAX 256

/* RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens. */
static int hostname_ok(const char *s) {
  size_t n = strlen(s), label = 0;
  if (n == 0 || n > HOSTNAME_MAX || s[0] == '.' || s[n - 1] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '.') {
      if (label == 0 || s[i - 1] == '-') return 0;
      label = 0;
      continue;
    }
    if (!(isalnum(c) || (c == '-' && label > 0))) return 0;
    if (++label > LABEL_MAX) return 0;
  }
  return s[n - 1] != '-';
}

static int address_ok(const char *s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

int ss_stack_check_hosts(const cJSON *v, const char *option, ss_error *err) {
  if (!v) return 0;
  const char *why = NULL;
  const cJSON *c = NULL;
  int n = 0;
  if (!cJSON_IsObject(v)) return ss_stack_fail_type(err, option, "a table of host names to addresses", v);
  cJSON_ArrayForEach(c, v) {
    if (!cJSON_IsString(c)) return ss_stack_fail_type(err, option, "a table of host names to address strings", c);
    if (++n > HOSTS_MAX) { why = "holds more than 256 names"; break; }
    if (!c->string || !hostname_ok(c->string)) { why = "has a name that is not a host name"; break; }
    if (!address_ok(c->valuestring)) { why = "has a value that is not an IPv4 or IPv6 address"; break; }
  }
  if (!why) return 0;
  ss_error_set(err, "compose", "invalid_option", "%s %s", option, why);
  ss_error_field_str(err, "option", option);
  if (c && c->string) ss_error_field_str(err, "host", c->string);
  return -1;
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* "name:address" lines sorted by name, so the same options always give the same body (a Lua
 * table's order is not its own). NULL for an absent or empty map. */
cJSON *ss_stack_extra_hosts(const cJSON *v) {
  int n = cJSON_IsObject(v) ? cJSON_GetArraySize(v) : 0;
  if (n <= 0) return NULL;
  const cJSON **items = calloc((size_t)n, sizeof *items);
  if (!items) return NULL;
  int k = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, v) items[k++] = c;
  qsort(items, (size_t)n, sizeof *items, by_name);
  cJSON *out = cJSON_CreateArray();
  char line[HOSTNAME_MAX + INET6_ADDRSTRLEN + 2];
  for (int i = 0; i < n; i++) {
    snprintf(line, sizeof line, "%s:%s", items[i]->string, items[i]->valuestring);
    cJSON_AddItemToArray(out, cJSON_CreateString(line));
  }
  free(items);
  return out;
}
