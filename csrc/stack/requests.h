#ifndef SANDSTACK_STACK_REQUESTS_H
#define SANDSTACK_STACK_REQUESTS_H
/* The bodiless requests of a stack's life as request objects {method, path, query?, ok?,
 * timeout?, max_bytes?, body_json?} (requests.c). Every function returns a new cJSON the caller
 * owns. */
#include <cjson/cJSON.h>

/* The label of the isolation self-check's memo volumes (docker/isolation.lua). */
#define SS_ISOLATION_MEMO_LABEL "io.sandstack.isolation"

/* {containers = [removals], networks = [...], volumes = [...]}, each removal with its kind and
 * name: the three rounds of a teardown, in compose's order (stack/batch.lua). Each list holds
 * names or objects with a "name". */
cJSON *ss_stack_removals(const cJSON *containers, const cJSON *networks, const cJSON *volumes);

/* The lists of containers (stopped ones too), networks and volumes carrying all n labels
 * ("key" or "key=value"). */
cJSON *ss_stack_list_requests(const char *const *labels, int n);

/* {networks, version, info, bridge, memos}: the engine-wide reads. */
cJSON *ss_engine_reads(void);

/* Adds to a plan (full or the slim one a handle keeps) each container's start and inspect and
 * the plan's removals {containers, networks, volumes, lists (the project's three label lists)}. */
void ss_stack_add_lifecycle(cJSON *plan);

/* ss_stack_add_lifecycle, and the start's first round (preflight: image reads, the self-check's
 * identity), each image's pull, and the self-check's own steps. */
void ss_stack_add_requests(cJSON *plan);

/* The memo of a passed self-check: {create, replace, stale = [removals]}. */
cJSON *ss_isolation_memo_requests(const cJSON *labels, const char *memo, const cJSON *stale);

#endif
