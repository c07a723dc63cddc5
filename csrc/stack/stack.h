#ifndef SANDSTACK_STACK_H
#define SANDSTACK_STACK_H
/* Spec 000 as pure data: options (cJSON, as the Lua table arrives) -> validation -> a plan
 * (networks, volumes, containers with their create bodies, connects, dependency order).
 * Nothing here talks to the daemon; lua/sandstack/docker.lua executes a plan. */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* Subnets for the networks' IPAM (CIDR strings, borrowed); NULL lets the engine pick. The
 * executor chooses them (from subnet_pool, against what the engine already uses) and plans
 * again when another process took one first. */
typedef struct ss_stack_subnets {
  const char *sbx, *pub, *egress, *isocheck;
} ss_stack_subnets;

/* What the plan needs besides the options. All strings are borrowed. */
typedef struct ss_stack_ctx {
  const char *session_key;        /* required */
  const char *api_version;        /* negotiated "1.41"; NULL plans for the oldest (1.41) */
  double now;                     /* creation time written into io.sandstack.created */
  const char *token;              /* per-session token; NULL mints one with getrandom */
  const char *egress_policy_json; /* rendered policy for the proxy, or NULL */
  const char *pool;               /* warm pool name: io.sandstack.pool on every object, or NULL */
  const char *run_label;          /* io.sandstack.run on every object, or NULL */
  const char *control_dir;        /* the host directory mounted as the added proxy's control
                                     directory (SS_CONTROL_PROXY_DIR), or NULL: no mount */
  long control_uid;               /* the uid the host connects to it as (with control_dir) */
  int redact_secrets; /* a plan shown, not applied: each credential's secret in the proxy's
                         environment is SS_STACK_REDACTED (the plan a start applies has it) */
  const cJSON *init_image; /* non-NULL: the sandbox runs under sandstack-init (init_wrap.h); the
                             sandbox image's Config (its Entrypoint and Cmd), as the engine has it */
  ss_stack_subnets subnets;
} ss_stack_ctx;

#define SS_STACK_MAX_SERVICES 64
/* The added proxy's control socket when the host mounts its control directory there. */
#define SS_CONTROL_PROXY_DIR "/run/sandstack-control"
#define SS_CONTROL_PROXY_SOCKET SS_CONTROL_PROXY_DIR "/control.sock"
#define SS_STACK_REDACTED "(secret not shown)"

/* Checks every spec rule of API.md without side effects. 0 or -1 with err set:
 * kind "compose" (reasons of API.md), or kind "usage"/reason "unknown_option" for an unknown
 * option key (the binding raises it) . */
int ss_stack_validate(const cJSON *opts, const char *session_key, ss_error *err);

/* Validates, then builds the plan. NULL with err set on failure. Caller owns the result. */
cJSON *ss_stack_plan(const cJSON *opts, const ss_stack_ctx *ctx, ss_error *err);

/* The egress_policy option compiled and rendered in canonical form (free with cJSON_free), or
 * NULL: without err set when there is none, with err (compose/invalid_option, field cause) when
 * it is not a valid policy. */
char *ss_stack_egress_policy(const cJSON *opts, ss_error *err);

/* The option names one level of a start's options accepts, NULL-ended: "start" (the top level),
 * "service", "mount" (a service's volume), "volume", "ready", "network", "credential", "port"; NULL for
 * another level. The validator refuses every other name; the reference is checked against these
 * (spec/docs_api_spec.lua), so a new option cannot go undocumented. */
const char *const *ss_stack_option_keys(const char *level);
const char *const *ss_stack_credential_keys(void);
/* The keys of one entry of `ports` (ports.c). */
const char *const *ss_stack_port_keys(void);

/* API version "1.41" -> 141 (major*100+minor); -1 when unparsable. */
int ss_stack_api_number(const char *v);

/* Picks a free subnet of the given prefix length inside pool ("10.213.0.0/16"), avoiding the
 * n subnets in used (CIDR strings, any prefix; unparsable ones are ignored). Starts at the
 * slot seed selects and walks forward, so concurrent callers with different seeds rarely
 * collide. Writes the CIDR into out. 0, or -1 with err (invalid_option, or exhausted). */
int ss_stack_pick_subnet(const char *pool, int prefix, const char *const *used, size_t n,
                         uint32_t seed, char *out, size_t outsz, ss_error *err);

#endif
