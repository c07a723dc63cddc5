/* The addresses a policy opens (csrc/policy/private.c, address.c): which ranges are refused, the
 * one spelling of an address, the entries allow_private accepts and the exact refusal of each
 * other, its rendering, and that it opens exactly the address (and port) it names. */
#include <stdio.h>
#include <stdlib.h>

#include "policy/address.h"
#include "policy/policy.h"
#include "test/unit.h"

#define USAGE_TEXT                                                                                                    \
  "an address in a refused range, as inet_ntop writes it, with an optional port: '10.0.0.7', '10.0.0.7:5000', "      \
  "'fd00::7', '[fd00::7]:5000'"

static const char *range_of(const char *text) {
  struct sockaddr_storage sa;
  if (ss_address_parse(text, &sa) != 0) return "(not an address)";
  const char *r = ss_address_range((const struct sockaddr *)&sa);
  return r ? r : "(none)";
}

static void classifies_ranges(ut_run *t) {
  static const char *const cases[][2] = {
      {"10.0.0.7", "private"},       {"172.16.0.1", "private"},      {"172.31.255.255", "private"},
      {"172.32.0.1", "(none)"},      {"192.168.1.1", "private"},     {"127.0.0.1", "loopback"},
      {"169.254.169.254", "link_local"}, {"100.64.0.1", "shared"},   {"0.1.2.3", "this_network"},
      {"224.0.0.1", "multicast"},    {"198.18.0.1", "reserved"},     {"8.8.8.8", "(none)"},
      {"198.51.100.2", "(none)"},    {"::1", "loopback"},            {"::", "unspecified"},
      {"fd00::7", "unique_local"},   {"fe80::1", "link_local"},      {"::ffff:10.0.0.7", "private"},
      {"64:ff9b::a00:7", "private"}, {"2002:a00:7::", "private"},    {"2001:db8::1", "(none)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!CHECK_STR(range_of(cases[i][0]), cases[i][1])) NOTE("%s", cases[i][0]);
}

static void parses_one_spelling(ut_run *t) {
  struct sockaddr_storage sa;
  CHECK_EQ(ss_address_parse("10.0.0.7", &sa), 0);
  CHECK_EQ(sa.ss_family, AF_INET);
  CHECK_EQ(ss_address_parse("fd00::7", &sa), 0);
  CHECK_EQ(sa.ss_family, AF_INET6);
  char text[64];
  ss_address_text((const struct sockaddr *)&sa, text, sizeof text);
  CHECK_STR(text, "fd00::7");
  /* what a resolver would also read, but not as inet_ntop writes it */
  static const char *const other[] = {"010.0.0.7", "10.0.7", "10.0.0.7 ", "FD00::7", "fd00:0::7", "fd00::7%eth0",
                                      "[fd00::7]", "registry.internal", "", "2130706433"};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (!CHECK_EQ(ss_address_parse(other[i], &sa), -1)) NOTE("'%s'", other[i]);
}

static void accepts_entries(ut_run *t) {
  static const char *const ok[][3] = {
      {"10.0.0.7", "10.0.0.7", "0"},           {"10.0.0.7:5000", "10.0.0.7", "5000"},
      {"127.0.0.1:9080", "127.0.0.1", "9080"}, {"169.254.169.254", "169.254.169.254", "0"},
      {"fd00::7", "fd00::7", "0"},             {"[fd00::7]:443", "fd00::7", "443"},
      {"100.64.0.9:22", "100.64.0.9", "22"},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ss_policy_private e;
    const char *why = ss_policy_private_parse(ok[i][0], &e);
    if (!CHECK(why == NULL)) {
      NOTE("%s: %s", ok[i][0], why);
      continue;
    }
    CHECK_STR(e.address, ok[i][1]);
    CHECK_EQ(e.port, atoi(ok[i][2]));
    char text[SS_POLICY_PRIVATE_TEXT];
    ss_policy_private_text(&e, text, sizeof text);
    CHECK_STR(text, ok[i][0]); /* rendered as written: one spelling */
  }
}

static void refuses_entries(ut_run *t) {
  static const char *const bad[][2] = {
      {"10.0.0.0/8", "name one address: a range (CIDR) is never opened"},
      {"8.8.8.8", "not in a refused range: an allow rule reaches it without allow_private"},
      {"198.51.100.2:80", "not in a refused range: an allow rule reaches it without allow_private"},
      {"0.0.0.0", "not a destination (0.0.0.0/8 and '::' stand for the proxy's own host; multicast is no single peer)"},
      {"::", "not a destination (0.0.0.0/8 and '::' stand for the proxy's own host; multicast is no single peer)"},
      {"224.0.0.1", "not a destination (0.0.0.0/8 and '::' stand for the proxy's own host; multicast is no single peer)"},
      {"10.0.0.7:0", "the port must be a number from 1 to 65535 without leading zeros"},
      {"10.0.0.7:65536", "the port must be a number from 1 to 65535 without leading zeros"},
      {"10.0.0.7:080", "the port must be a number from 1 to 65535 without leading zeros"},
      {"10.0.0.7:", "the port must be a number from 1 to 65535 without leading zeros"},
      {"[fd00::7]", "'[address]' needs ':port' after it (without a port, write the address bare): " USAGE_TEXT},
      {"[10.0.0.7]:80", "brackets are for IPv6 addresses only: " USAGE_TEXT},
      {"registry.internal", USAGE_TEXT},
      {"010.0.0.7", USAGE_TEXT},
      {"FD00::7", USAGE_TEXT},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ss_policy_private e;
    if (!CHECK_STR(ss_policy_private_parse(bad[i][0], &e), bad[i][1])) NOTE("'%s'", bad[i][0]);
  }
}

static ss_policy *parse(const char *json, ss_error *e) {
  ss_error_init(e);
  return ss_policy_parse(json, strlen(json), e);
}

/* In a policy: read, rendered back as written, and opening exactly what it names. */
static void opens_what_it_names(ut_run *t) {
  ss_error e;
  ss_policy *p = parse("{\"allow\":[\"registry.test:5000\",\"lab.test\"],"
                       "\"allow_private\":[\"10.0.0.7\",\"10.0.0.8:5000\",\"[fd00::7]:443\"]}", &e);
  if (!CHECK(p != NULL)) {
    NOTE("%s", e.message);
    ss_error_clear(&e);
    return;
  }
  CHECK_EQ(p->nprivate, 3);
  cJSON *j = ss_policy_render(p);
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  CHECK_STR(s, "{\"version\":1,\"allow\":[{\"host\":\"registry.test\",\"port\":5000},{\"host\":\"lab.test\"}],"
               "\"allow_private\":[\"10.0.0.7\",\"10.0.0.8:5000\",\"[fd00::7]:443\"]}");
  ss_policy *q = s ? ss_policy_parse(s, strlen(s), &e) : NULL; /* the render reads back the same */
  CHECK(q != NULL && q->nprivate == 3 && q->allow_private[1].port == 5000);
  ss_policy_free(q);
  free(s);
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.7", 5000), 1); /* every port */
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.7", 22), 1);
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.8", 5000), 1); /* its port only */
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.8", 5001), 0);
  CHECK_EQ(ss_policy_names_address(p, "fd00::7", 443), 1);
  CHECK_EQ(ss_policy_names_address(p, "fd00::7", 80), 0);
  CHECK_EQ(ss_policy_names_address(p, "10.0.0.9", 5000), 0);       /* a neighbour: no range opens */
  CHECK_EQ(ss_policy_names_address(p, "127.0.0.1", 5000), 0);      /* loopback unless named */
  CHECK_EQ(ss_policy_names_address(p, "169.254.169.254", 80), 0);  /* the metadata service unless named */
  CHECK_EQ(ss_policy_names_address(p, "::ffff:10.0.0.7", 5000), 0); /* the same IPv4 in another spelling */
  /* it admits nothing by itself: the rules decide which names and ports are reached */
  ss_policy_verdict v;
  ss_policy_check(p, "10.0.0.7", 8, NULL, 0, NULL, 0, 5000, &v);
  CHECK_EQ(v.admitted, 0);
  ss_policy_free(p);
  p = parse("{\"allow\":[],\"allow_private\":{}}", &e); /* an empty Lua table: nothing named */
  CHECK(p != NULL && p->nprivate == 0);
  ss_policy_free(p);
}

static void refused(ut_run *t, const char *json, const char *message, int entry) {
  ss_error e;
  ss_policy *p = parse(json, &e);
  if (!CHECK(p == NULL)) {
    ss_policy_free(p);
    return;
  }
  if (!CHECK_STR(e.message, message)) NOTE("%s", json);
  const cJSON *f = e.fields ? cJSON_GetObjectItemCaseSensitive(e.fields, "allow_private") : NULL;
  CHECK_EQ(f ? f->valueint : 0, entry);
  ss_error_clear(&e);
}

static void refuses_policies(ut_run *t) {
  refused(t, "{\"allow_private\":\"10.0.0.7\"}",
          "'allow_private' must be a list of addresses ('10.0.0.7', '10.0.0.7:5000')", 0);
  refused(t, "{\"allow_private\":[\"10.0.0.7\",7]}", "allow_private 2: must be a string", 2);
  refused(t, "{\"allow_private\":[\"10.0.0.7\",\"10.0.0.0/24\"]}",
          "allow_private 2 ('10.0.0.0/24'): name one address: a range (CIDR) is never opened", 2);
  refused(t, "{\"allow_private\":[\"10.0.0.7:80\",\"10.0.0.7:443\"]}",
          "allow_private 2 ('10.0.0.7:443'): names an address an earlier entry names", 2);
  char big[64 * 20 + 64] = "{\"allow_private\":[";
  for (int i = 0; i < 65; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "%s\"10.0.1.%d\"", i ? "," : "", i + 1);
  strcat(big, "]}");
  refused(t, big, "'allow_private' names more than 64 addresses", 0);
  refused(t, "{\"allow_privat\":[]}",
          "unknown key 'allow_privat' (did you mean 'allow_private'?) in the policy (only 'allow', 'inspect', 'ask', "
          "'ask_timeout' and 'allow_private')", 0);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  ut_run t;
  ut_begin(&t, "policy_private");
  UT_RUN(&t, classifies_ranges);
  UT_RUN(&t, parses_one_spelling);
  UT_RUN(&t, accepts_entries);
  UT_RUN(&t, refuses_entries);
  UT_RUN(&t, opens_what_it_names);
  UT_RUN(&t, refuses_policies);
  return ut_end(&t);
}
