/* The Swarm plan (csrc/stack/swarm_plan.c, swarm_service.c): the stack's plan re-expressed for a
 * swarm's manager, with the sandbox network an internal attachable overlay, the services in
 * dependency order, the first reserving the session's resources and the others pinned to its
 * node, and every setting Swarm cannot express refused by the option's name, never dropped. The
 * fuzz target's seeds (fuzz_swarm_plan) are cases. */
#include <stdio.h>

#include "stack/swarm.h"
#include "test/plan_read.h"
#include "test/unit.h"

/* The swarm plan of options (JSON text) for session s1, the later services pinned to node_id
 * (NULL: the first is not placed yet); NULL with e set. */
static cJSON *swarm_plan(const char *json, const char *node_id, ss_error *e) {
  ss_error_init(e);
  cJSON *opts = cJSON_Parse(json), *p = NULL;
  ss_stack_model *m = calloc(1, sizeof *m);
  if (opts && m && ss_stack_model_build(opts, "s1", m, e) == 0) {
    char *policy = ss_stack_egress_policy(opts, e);
    ss_stack_ctx ctx = {.session_key = "s1", .api_version = "1.41", .now = 1, .token = "t", .egress_policy_json = policy};
    const char *cons[] = {"node.labels.pool==agents"};
    cJSON *constraints = cJSON_CreateStringArray(cons, 1);
    ss_swarm_ctx sw = {.constraints = constraints, .node_id = node_id};
    p = ss_swarm_plan(m, &ctx, &sw, e);
    cJSON_Delete(constraints);
    cJSON_free(policy);
  }
  free(m);
  cJSON_Delete(opts);
  return p;
}

#define STACK                                                                                                       \
  "{\"image\":\"img/a\",\"agent_port\":8080,\"cpus\":0.5,\"memory\":\"64m\",\"tmpfs\":{\"/tmp\":\"size=16m,mode=1777,rw\"}," \
  "\"volumes\":[{\"name\":\"w\"}],\"services\":[{\"name\":\"sandbox\",\"image\":\"i\",\"volumes\":[{\"name\":\"w\"," \
  "\"target\":\"/w\"}]},{\"name\":\"db\",\"image\":\"d\",\"egress\":\"allow\"}],\"egress_policy\":{\"allow\":[\"x.test\"]}}"

static void plans_services_on_overlays(ut_run *t) {
  ss_error e;
  cJSON *p = swarm_plan(STACK, "abc123", &e);
  if (!CHECK(p != NULL)) {
    NOTE("%s", e.message);
    return;
  }
  const cJSON *s = pr_at(p, "swarm");
  char list[512];
  CHECK_STR(pr_str(s, "overlays/0/key"), "sbx");
  cJSON *sbx = pr_body(s, "overlays/0/create"), *egress = pr_body(s, "overlays/1/create");
  CHECK_STR(pr_str(sbx, "Driver"), "overlay");
  CHECK_EQ(pr_bool(sbx, "Internal"), 1);
  CHECK_EQ(pr_bool(sbx, "Attachable"), 1); /* the forwarder, a plain container on the node, joins it */
  CHECK_EQ(pr_bool(egress, "Internal"), 0);
  CHECK_EQ(pr_bool(egress, "Attachable"), 0);
  CHECK_EQ(cJSON_GetArraySize(pr_at(s, "overlays")), 2); /* pub stays the node's own */
  CHECK_STR(pr_str(s, "local_networks/0/key"), "pub");
  CHECK_STR(pr_str(s, "forwarder/role"), "forwarder");
  CHECK_STR(pr_str(s, "services/0/name"), "sandstack-s1-db");
  CHECK_STR(pr_str(s, "services/1/name"), "sandstack-s1-proxy");
  CHECK_STR(pr_str(s, "services/2/name"), "sandstack-s1-sandbox");
  CHECK_STR(pr_str(s, "services/0/create/path"), "/services/create");
  cJSON *first = pr_body(s, "services/0/create"), *sandbox = pr_body(s, "services/2/create");
  /* the first reserves what the whole session may use (4 containers of 0.5 CPU and 64 MiB) */
  CHECK_EQ(pr_num(first, "TaskTemplate/Resources/Reservations/NanoCPUs"), 2e9);
  CHECK_EQ(pr_num(first, "TaskTemplate/Resources/Reservations/MemoryBytes"), 4 * 64 * 1024 * 1024);
  CHECK_STR(pr_join(first, "TaskTemplate/Placement/Constraints", list, sizeof list), "node.labels.pool==agents");
  CHECK_STR(pr_join(sandbox, "TaskTemplate/Placement/Constraints", list, sizeof list),
            "node.labels.pool==agents,node.id==abc123");
  CHECK(pr_at(sandbox, "TaskTemplate/Resources/Reservations") == NULL);
  /* the hardening, in Swarm's words */
  CHECK_STR(pr_join(sandbox, "TaskTemplate/ContainerSpec/CapabilityDrop", list, sizeof list), "ALL");
  CHECK_EQ(pr_bool(sandbox, "TaskTemplate/ContainerSpec/Privileges/NoNewPrivileges"), 1);
  CHECK_EQ(pr_num(sandbox, "TaskTemplate/Resources/Limits/Pids"), 512);
  CHECK_STR(pr_str(sandbox, "TaskTemplate/RestartPolicy/Condition"), "none");
  CHECK_STR(pr_join(sandbox, "TaskTemplate/ContainerSpec/DNSConfig/Nameservers", list, sizeof list), "203.0.113.53");
  CHECK_STR(pr_str(sandbox, "TaskTemplate/Networks/0/Target"), "sandstack-s1-sbx");
  CHECK(pr_at(sandbox, "TaskTemplate/Networks/1") == NULL); /* the sandbox never on egress */
  CHECK_STR(pr_str(sandbox, "TaskTemplate/ContainerSpec/Mounts/0/Source"), "sandstack-s1-w");
  CHECK_STR(pr_str(sandbox, "TaskTemplate/ContainerSpec/Mounts/1/Type"), "tmpfs");
  CHECK_EQ(pr_num(sandbox, "TaskTemplate/ContainerSpec/Mounts/1/TmpfsOptions/SizeBytes"), 16 * 1024 * 1024);
  CHECK_EQ(pr_num(sandbox, "TaskTemplate/ContainerSpec/Mounts/1/TmpfsOptions/Mode"), 01777);
  CHECK_STR(pr_str(s, "services/2/inspect/path"), "/services/sandstack-s1-sandbox");
  CHECK_STR(pr_str(s, "reads/node/path"), "/nodes/abc123");
  CHECK_STR(pr_str(s, "node_check/create/path"), "/containers/create?name=sandstack-s1-nodecheck");
  CHECK_EQ(pr_bool(s, "nnp"), 1);
  cJSON_Delete(sbx);
  cJSON_Delete(egress);
  cJSON_Delete(first);
  cJSON_Delete(sandbox);
  cJSON_Delete(p);
  /* before the first service is placed nothing is pinned, and no node is read */
  p = swarm_plan(STACK, NULL, &e);
  REQUIRE(CHECK(p != NULL));
  sandbox = pr_body(p, "swarm/services/2/create");
  CHECK_STR(pr_join(sandbox, "TaskTemplate/Placement/Constraints", list, sizeof list), "node.labels.pool==agents");
  CHECK(pr_at(p, "swarm/reads/node") == NULL);
  cJSON_Delete(sandbox);
  cJSON_Delete(p);
}

static void refused(ut_run *t, const char *json, const char *node_id, const char *reason, const char *message) {
  ss_error e;
  cJSON *p = swarm_plan(json, node_id, &e);
  if (!CHECK(p == NULL)) NOTE("planned: %s", json);
  CHECK_STR(e.reason, reason);
  CHECK_STR(e.message, message);
  cJSON_Delete(p);
  ss_error_clear(&e);
}

#define WITH(extra) "{\"image\":\"i\",\"agent_port\":8080," extra "}"

static void refuses_what_swarm_cannot_express(ut_run *t) {
  refused(t, WITH("\"runtime\":\"runsc\""), NULL, "invalid_option",
          "runtime: a Swarm service cannot choose an engine runtime; make it the nodes' default-runtime instead");
  refused(t, WITH("\"pull\":\"always\""), NULL, "invalid_option",
          "pull: on a swarm the node's agent pulls a task's image itself when it is absent; only \"missing\" can be kept");
  refused(t, WITH("\"subnet_pool\":\"10.9.0.0/16\""), NULL, "invalid_option",
          "subnet_pool: overlay subnets come from the swarm's own pool (docker swarm init --default-addr-pool)");
  refused(t, WITH("\"network\":{\"driver\":\"bridge\",\"options\":{\"a\":\"b\"}}"), NULL, "invalid_option",
          "network: on a swarm the sandbox network is an overlay; a driver or driver options of the bridge have no "
          "meaning there");
  refused(t, WITH("\"tmpfs\":{\"/tmp\":\"size=1x,noexec\"}"), NULL, "invalid_option", "tmpfs: /tmp: size \"1x\" is not a size");
  refused(t, WITH("\"tmpfs\":{\"/tmp\":\"noexec\"}"), NULL, "invalid_option",
          "tmpfs: /tmp: the option \"noexec\" has no Swarm form (a service's tmpfs takes size and mode)");
  refused(t, WITH("\"security_opt\":[\"seccomp=unconfined\"]"), NULL, "invalid_option",
          "security_opt: \"seccomp=unconfined\" has no Swarm form (a service takes no-new-privileges only)");
  refused(t, "{\"image\":\"i\",\"agent_port\":8080}", "a b", "bad_answer", "the manager named a node id that is not letters and digits");
}

/* The seeds: byte 0 picks the node id and constraints, the rest is the options. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  REQUIRE(CHECK(len > 1));
  char *json = strndup((const char *)data + 1, len - 1);
  ss_error e;
  cJSON *p = swarm_plan(json, data[0] & 8 ? "abc123" : NULL, &e);
  free(json);
  if (strcmp(name, "refused") == 0) { /* no agent_port: refused before any Swarm rule */
    CHECK(p == NULL);
    CHECK_STR(e.message, "agent_port is required: the port the agent listens on (1-65535)");
  } else if (strcmp(name, "stack") == 0) {
    if (CHECK(p != NULL)) {
      CHECK_EQ(cJSON_GetArraySize(pr_at(p, "swarm/services")), 3);
      CHECK_STR(pr_str(p, "swarm/services/2/role"), "sandbox");
      CHECK_STR(pr_str(p, "swarm/volumes/0"), "sandstack-s1-w");
    }
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
  cJSON_Delete(p);
  ss_error_clear(&e);
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "stack_swarm_plan");
  UT_RUN(&t, plans_services_on_overlays);
  UT_RUN(&t, refuses_what_swarm_cannot_express);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_swarm_plan", seed, NULL);
  return ut_end(&t);
}
