/* The stack spec planned into Engine requests (csrc/stack: validate.c, plan.c and the pieces
 * they use): the networks that cut the sandbox off, the hardening every container gets, the
 * added proxy and where the key and the credentials' secrets go (the proxy, never the sandbox),
 * what differs by API version, and each invalid spec refused with its kind and reason. The fuzz
 * target's seeds (fuzz_stack_spec) are cases. */
#include <stdio.h>

#include "stack/stack.h"
#include "test/plan_read.h"
#include "test/unit.h"

/* Plans options (JSON text) for session s1 at api; NULL with e set. */
static cJSON *plan(const char *json, const char *api, ss_error *e) {
  ss_error_init(e);
  cJSON *opts = cJSON_Parse(json);
  if (!opts) return NULL;
  char *policy = ss_stack_egress_policy(opts, e); /* as the binding hands it to the plan */
  ss_stack_ctx ctx = {.session_key = "s1", .api_version = api, .now = 1, .token = "t", .egress_policy_json = policy};
  cJSON *p = ss_error_isset(e) ? NULL : ss_stack_plan(opts, &ctx, e);
  cJSON_free(policy);
  cJSON_Delete(opts);
  return p;
}

static void cuts_the_sandbox_off(ut_run *t) {
  ss_error e;
  cJSON *p = plan("{\"agent_port\":8080,\"image\":\"img/a\"}", "1.41", &e);
  REQUIRE(CHECK(p != NULL));
  char list[512];
  CHECK_STR(pr_str(p, "project"), "sandstack-s1");
  CHECK_STR(pr_join(p, "order", list, sizeof list), "sandbox,forwarder");
  CHECK_EQ(cJSON_GetArraySize(pr_at(p, "networks")), 2); /* no egress network: nothing has egress */
  cJSON *sbx = pr_body(p, "networks/0"), *pub = pr_body(p, "networks/1");
  CHECK_STR(pr_str(p, "networks/0/path"), "/networks/create");
  CHECK_STR(pr_str(sbx, "Name"), "sandstack-s1-sbx");
  CHECK_EQ(pr_bool(sbx, "Internal"), 1);
  CHECK_EQ(pr_bool(sbx, "EnableIPv6"), 0);
  CHECK_STR(pr_str(sbx, "Options/com.docker.network.bridge.inhibit_ipv4"), "true");
  CHECK_STR(pr_str(sbx, "Labels/io.sandstack.project"), "sandstack-s1");
  CHECK_EQ(pr_bool(pub, "Internal"), 0);
  CHECK_STR(pr_str(pub, "Options/com.docker.network.bridge.enable_ip_masquerade"), "false");
  cJSON *sandbox = pr_body(p, "containers/0"), *fwd = pr_body(p, "containers/1");
  CHECK_STR(pr_str(p, "containers/0/path"), "/containers/create?name=sandstack-s1-sandbox");
  CHECK_STR(pr_str(sandbox, "HostConfig/NetworkMode"), "sandstack-s1-sbx");
  CHECK_STR(pr_join(sandbox, "HostConfig/CapDrop", list, sizeof list), "ALL");
  CHECK_STR(pr_join(sandbox, "HostConfig/SecurityOpt", list, sizeof list), "no-new-privileges");
  CHECK_EQ(pr_num(sandbox, "HostConfig/PidsLimit"), 512);
  CHECK_STR(pr_str(sandbox, "HostConfig/RestartPolicy/Name"), "no");
  CHECK_STR(pr_join(sandbox, "HostConfig/Dns", list, sizeof list), "203.0.113.53"); /* a name it asks dies inside */
  CHECK_STR(pr_env(sandbox, "AGENT_PORT"), "8080");
  CHECK(pr_env(sandbox, "ANTHROPIC_API_KEY") == NULL);
  /* the forwarder publishes on loopback only, from the pub network, joined to sbx */
  const cJSON *binding = cJSON_GetObjectItemCaseSensitive(pr_at(fwd, "HostConfig/PortBindings"), "8080/tcp");
  CHECK_STR(pr_str(binding, "0/HostIp"), "127.0.0.1");
  CHECK_STR(pr_str(binding, "0/HostPort"), "");
  CHECK_STR(pr_str(fwd, "HostConfig/NetworkMode"), "sandstack-s1-pub");
  CHECK_STR(pr_join(fwd, "Cmd", list, sizeof list), "TCP-LISTEN:8080,fork,reuseaddr,TCP:sandbox:8080");
  CHECK_STR(pr_str(p, "containers/1/connects/0/path"), "/networks/sandstack-s1-sbx/connect");
  CHECK_STR(pr_str(p, "isolation_check/name"), "sandstack-s1-isocheck");
  cJSON_Delete(sbx);
  cJSON_Delete(pub);
  cJSON_Delete(sandbox);
  cJSON_Delete(fwd);
  cJSON_Delete(p);
}

static void plans_for_the_engines_api(ut_run *t) {
  ss_error e;
  cJSON *old = plan("{\"agent_port\":8080,\"image\":\"img/a\"}", "1.41", &e);
  cJSON *now = plan("{\"agent_port\":8080,\"image\":\"img/a\"}", "1.48", &e);
  REQUIRE(CHECK(old && now));
  cJSON *a = pr_body(old, "networks/0"), *b = pr_body(now, "networks/0"), *fwd = pr_body(now, "containers/1");
  CHECK_EQ(pr_bool(old, "dual_attach_at_create"), 0);
  CHECK_EQ(pr_bool(now, "dual_attach_at_create"), 1);
  CHECK_EQ(pr_bool(a, "CheckDuplicate"), 1); /* below 1.44 a duplicate name is silently a second network */
  CHECK_EQ(pr_bool(b, "CheckDuplicate"), -1);
  CHECK(pr_at(a, "Options/com.docker.network.bridge.gateway_mode_ipv4") == NULL); /* 27.x rejects it */
  CHECK_STR(pr_str(b, "Options/com.docker.network.bridge.gateway_mode_ipv4"), "isolated");
  CHECK_EQ(pr_bool(b, "EnableIPv4"), 1);
  CHECK_EQ(cJSON_GetArraySize(pr_at(now, "containers/1/connects")), 0); /* both networks at create */
  CHECK(pr_at(fwd, "NetworkingConfig/EndpointsConfig/sandstack-s1-sbx") != NULL);
  CHECK_EQ(ss_stack_api_number("1.41"), 141);
  CHECK_EQ(ss_stack_api_number("1.x"), -1);
  CHECK_EQ(ss_stack_api_number("1.100"), -1);
  cJSON_Delete(a);
  cJSON_Delete(b);
  cJSON_Delete(fwd);
  cJSON_Delete(old);
  cJSON_Delete(now);
}

/* The added proxy holds the key; the sandbox holds a token and reaches out only through it. */
static void keeps_the_key_in_the_proxy(ut_run *t) {
  ss_error e;
  cJSON *p = plan("{\"agent_port\":8080,\"image\":\"img/a\",\"api_key\":\"sk-secret-0123456789\","
                  "\"egress_policy\":{\"allow\":[\"api.test\"]},\"services\":[{\"name\":\"db\",\"image\":\"d\",\"egress\":\"allow\"}]}",
                  "1.41", &e);
  if (!CHECK(p != NULL)) {
    NOTE("%s", e.message);
    return;
  }
  char list[512];
  CHECK_STR(pr_join(p, "order", list, sizeof list), "db,proxy,sandbox,forwarder");
  CHECK_STR(pr_str(p, "proxy/service"), "proxy");
  CHECK_EQ(pr_num(p, "proxy/port"), 3128);
  CHECK_EQ(pr_bool(p, "proxy/added"), 1);
  CHECK_STR(pr_str(p, "session_token"), "t");
  CHECK_STR(pr_str(p, "networks/2/key"), "egress");
  cJSON *db = pr_body(p, "containers/0"), *proxy = pr_body(p, "containers/1"), *sandbox = pr_body(p, "containers/2");
  CHECK_STR(pr_join(p, "containers/2/depends_on", list, sizeof list), "proxy");
  CHECK_STR(pr_env(proxy, "ANTHROPIC_API_KEY"), "sk-secret-0123456789");
  CHECK_STR(pr_env(proxy, "SANDSTACK_SESSION_TOKEN"), "t");
  CHECK_STR(pr_env(proxy, "SANDSTACK_EGRESS_POLICY"), "{\"version\":1,\"allow\":[{\"host\":\"api.test\"}]}");
  CHECK_STR(pr_env(sandbox, "ANTHROPIC_API_KEY"), "t");
  CHECK_STR(pr_env(sandbox, "ANTHROPIC_BASE_URL"), "http://proxy:3128");
  CHECK_STR(pr_env(sandbox, "HTTPS_PROXY"), "http://sandstack:t@proxy:3128");
  CHECK_STR(pr_env(sandbox, "NO_PROXY"), "localhost,127.0.0.1,::1,forwarder,db,sandbox,proxy");
  CHECK(strstr(pr_str(p, "containers/2/body_json"), "sk-secret") == NULL); /* nowhere in the sandbox's create */
  /* the sidecars with egress are on the egress network (a connect below 1.44), without the dead DNS */
  CHECK_STR(pr_str(p, "containers/0/connects/0/network"), "sandstack-s1-egress");
  CHECK_STR(pr_str(p, "containers/1/connects/0/network"), "sandstack-s1-egress");
  CHECK(pr_at(db, "HostConfig/Dns") == NULL);
  CHECK_EQ(cJSON_GetArraySize(pr_at(p, "containers/2/connects")), 0);
  cJSON_Delete(db);
  cJSON_Delete(proxy);
  cJSON_Delete(sandbox);
  cJSON_Delete(p);
}

static void refused(ut_run *t, const char *json, const char *kind, const char *reason) {
  ss_error e;
  cJSON *p = plan(json, "1.41", &e);
  if (!CHECK(p == NULL)) NOTE("planned: %s", json);
  if (!(CHECK_STR(e.kind, kind) & CHECK_STR(e.reason, reason))) NOTE("%s: %s", json, e.message);
  cJSON_Delete(p);
  ss_error_clear(&e);
}

#define SPEC(services) "{\"agent_port\":8080,\"image\":\"img/a\",\"services\":[" services "]}"

static void refuses_an_invalid_spec(ut_run *t) {
  refused(t, SPEC("{\"name\":\"db\",\"image\":\"d\"}"), "compose", "egress_required");
  refused(t, SPEC("{\"name\":\"sandbox\",\"image\":\"d\",\"egress\":\"allow\"}"), "compose", "sandbox_egress_forbidden");
  refused(t, SPEC("{\"name\":\"a\",\"image\":\"d\",\"egress\":\"none\",\"depends_on\":[\"b\"]},"
                  "{\"name\":\"b\",\"image\":\"d\",\"egress\":\"none\",\"depends_on\":[\"a\"]}"),
          "compose", "dependency_cycle");
  refused(t, SPEC("{\"name\":\"a\",\"image\":\"d\",\"egress\":\"none\",\"depends_on\":[\"zz\"]}"), "compose",
          "unknown_dependency");
  refused(t, SPEC("{\"name\":\"a\",\"image\":\"d\",\"egress\":\"none\"},{\"name\":\"a\",\"image\":\"d\",\"egress\":\"none\"}"),
          "compose", "duplicate_service");
  refused(t, SPEC("{\"name\":\"forwarder\",\"image\":\"d\",\"egress\":\"none\"}"), "compose", "duplicate_service");
  refused(t, SPEC("{\"name\":\"a b\",\"image\":\"d\",\"egress\":\"none\"}"), "compose", "invalid_name");
  refused(t, SPEC("{\"name\":\"a\",\"image\":\"d\",\"egress\":\"some\"}"), "compose", "invalid_option");
  refused(t, "{\"agent_port\":8080}", "compose", "missing_image");
  refused(t, "{\"agent_port\":8080,\"image\":\"a\",\"agnet_port\":1}", "usage", "unknown_option");
  refused(t, "{\"agent_port\":8080,\"image\":\"a\",\"proxy_service\":\"nope\"}", "compose", "unknown_proxy_service");
  refused(t, "{\"agent_port\":8080,\"image\":\"a\",\"proxy_hosts\":{\"a.test\":\"10.0.0.1\"}}", "compose",
          "invalid_option"); /* shapes an added proxy, and none is added */
  refused(t, "{\"agent_port\":8080,\"image\":\"a\",\"egress_policy\":{\"allow\":[\"*\"]}}", "compose", "invalid_option");
  refused(t, "[1]", "usage", "not_a_table");
  ss_error e;
  ss_error_init(&e);
  cJSON *opts = cJSON_Parse("{\"agent_port\":8080,\"image\":\"a\"}");
  CHECK_EQ(ss_stack_validate(opts, "bad key", &e), -1); /* the session key names every object */
  CHECK_STR(e.reason, "invalid_name");
  cJSON_Delete(opts);
  ss_error_clear(&e);
}

static void picks_free_subnets(ut_run *t) {
  char out[32];
  ss_error e;
  ss_error_init(&e);
  const char *used[] = {"10.213.0.0/24", "junk", "10.213.1.128/25"};
  CHECK_EQ(ss_stack_pick_subnet("10.213.0.0/16", 24, used, 3, 0, out, sizeof out, &e), 0);
  CHECK_STR(out, "10.213.2.0/24"); /* the first slot free of every used range it overlaps */
  CHECK_EQ(ss_stack_pick_subnet("10.213.0.0/16", 24, used, 3, 255, out, sizeof out, &e), 0);
  CHECK_STR(out, "10.213.255.0/24");
  CHECK_EQ(ss_stack_pick_subnet("10.213.0.0/24", 24, used, 1, 7, out, sizeof out, &e), -1);
  CHECK_STR(e.reason, "pool_exhausted");
  ss_error_clear(&e);
  CHECK_EQ(ss_stack_pick_subnet("10.213.0.0/28", 24, used, 0, 0, out, sizeof out, &e), -1);
  CHECK_STR(e.reason, "invalid_option"); /* the pool is smaller than one subnet */
  ss_error_clear(&e);
}

/* credentials.json: where each secret, and each placeholder, went. */
static void check_credentials(ut_run *t, const cJSON *p) {
  /* the record's credentials carry no secret; the sandbox holds placeholders as long as them */
  CHECK_EQ(cJSON_GetArraySize(pr_at(p, "credentials")), 4);
  CHECK_STR(pr_str(p, "credentials/0/host"), "api.github.com"); /* canonical */
  CHECK(pr_at(p, "credentials/0/secret") == NULL);
  const char *sandbox = pr_str(p, "containers/1/body_json"), *proxy = pr_str(p, "containers/0/body_json");
  REQUIRE(CHECK(sandbox && proxy));
  static const char *const secrets[] = {"ghp_0123456789abcdefghij", "qqqqqqqqqqqqqqqqqqqq", "pppppppppppppppppppp",
                                        "bbbbbbbbbbbbbbbbbbbb", "sk-0123456789abcdef"};
  for (size_t i = 0; i < 5; i++) {
    if (!CHECK(strstr(sandbox, secrets[i]) == NULL)) NOTE("secret %zu in the sandbox's create", i);
    if (!CHECK(strstr(proxy, secrets[i]) != NULL)) NOTE("secret %zu not in the proxy's create", i);
  }
  cJSON *body = pr_body(p, "containers/1");
  const char *ph = pr_env(body, "GH_TOKEN");
  if (CHECK(ph != NULL)) {
    CHECK_EQ(strlen(ph), strlen(secrets[0]));
    CHECK_EQ(strspn(ph, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"), strlen(ph));
    CHECK_STR(ph, pr_str(p, "credentials/0/placeholder"));
  }
  CHECK_STR(pr_env(body, "SSL_CERT_FILE"), "/etc/sandstack/ca/bundle.pem"); /* the proxy inspects their hosts */
  cJSON_Delete(body);
}

/* The seeds are options as they are. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  char *json = strndup((const char *)data, len);
  ss_error e;
  cJSON *p = plan(json, "1.41", &e);
  free(json);
  if (strcmp(name, "credentials_bad.json") == 0) {
    CHECK(p == NULL);
    CHECK_STR(e.reason, "invalid_option");
    CHECK_STR(e.message, "credentials[1].header names a header that frames or routes the request, never a credential's place");
  } else if (strcmp(name, "credentials.json") == 0) {
    if (!CHECK(p != NULL)) NOTE("%s", e.message);
    else check_credentials(t, p);
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
  cJSON_Delete(p);
  ss_error_clear(&e);
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "stack_plan");
  UT_RUN(&t, cuts_the_sandbox_off);
  UT_RUN(&t, plans_for_the_engines_api);
  UT_RUN(&t, keeps_the_key_in_the_proxy);
  UT_RUN(&t, refuses_an_invalid_spec);
  UT_RUN(&t, picks_free_subnets);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_stack_spec", seed, NULL);
  return ut_end(&t);
}
