#ifndef SANDSTACK_STACK_SWARM_H
#define SANDSTACK_STACK_SWARM_H
/* The Swarm plan (sandstack.swarm): the stack's plan re-expressed for a swarm's manager, every
 * body finished here so the executor in Lua sends them as they are. Services and overlays go to
 * the manager; the forwarder and its publish network stay the plan's own containers, made on
 * the chosen node's engine. Nothing is translated by guess: every Config and HostConfig field
 * the plan may hold has a rule (swarm_service.c), and a field without one, or a value Swarm
 * cannot express, is refused as compose/invalid_option naming the option, so a stack on a swarm
 * never runs weaker than the same options would on one engine. */
#include <cjson/cJSON.h>

#include "stack/model.h"

/* What a swarm plan needs besides the stack's context. Borrowed. */
typedef struct ss_swarm_ctx {
  const cJSON *constraints; /* the operator's placement constraints (strings), or NULL */
  const char *node_id;      /* the node Swarm chose for the first service: every later service is
                               pinned to it (node.id==...); NULL before the first is placed */
} ss_swarm_ctx;

/* The options a swarm cannot honour at all (runtime, subnet_pool, pull other than "missing", a
 * bridge driver or its options): 0, or -1 with compose/invalid_option naming the option. */
int ss_swarm_check_options(const cJSON *opts, ss_error *err);

/* The finished stack plan with its Swarm shape as member "swarm":
 *   {project, overlays = [{key, name, create}], services = [{service, name, role, depends_on,
 *    check?, check_timeout?, healthcheck, create}], local_networks = [the plan's pub network],
 *    forwarder = <the plan's forwarder container>, node_check = {name, create, start, remove} (the
 *    probe of the node's promises, made on the node), reads = {info, existing, node?} (the
 *    manager's: /info, the project's services, the pinned node), volumes = [names], nnp,
 *    reservation}
 * where each create is a finished request {method, path, body_json}, and each service has its
 * tasks and inspect requests (by its name). NULL with err set. */
cJSON *ss_swarm_plan(const ss_stack_model *m, const ss_stack_ctx *ctx, const ss_swarm_ctx *sw, ss_error *err);

/* swarm_service.c: one drafted container (its "body" an object) as a Swarm service spec, or
 * NULL with err set. overlays: the names of the stack's overlays; volumes: the drafted volume
 * entries; constraints as in ss_swarm_ctx (node.id==node_id added when node_id is given).
 * *nnp is set when the service keeps no-new-privileges. */
cJSON *ss_swarm_service(const cJSON *c, const cJSON *overlays, const cJSON *volumes, const ss_swarm_ctx *sw,
                        int *nnp, ss_error *err);

/* "size=64m,mode=1777,rw" as a Swarm TmpfsOptions object (SizeBytes, Mode; NULL when neither is
 * given), or -1 with compose/invalid_option (option "tmpfs"): a service's tmpfs takes a size and
 * a mode only. path is named in the message. */
int ss_swarm_tmpfs_options(const char *path, const char *text, cJSON **out, ss_error *err);

/* Sets err to compose/invalid_option "<option>: <message>" with field option; returns -1. */
int ss_swarm_refuse(ss_error *err, const char *option, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
