#ifndef SANDSTACK_STACK_MODEL_H
#define SANDSTACK_STACK_MODEL_H
/* The validated options, normalised: what validate.c hands to plan.c. Strings and cJSON
 * pointers are borrowed from the options tree, which must outlive the model. */
#include "stack/stack.h"

typedef struct ss_svc {
  const char *name;
  const cJSON *spec;  /* the service table, or NULL for a sandbox synthesised from `image` */
  const char *image;
  int egress_allow;
  int is_sandbox;
  int port;           /* proxy port, 0 when not the proxy */
  const cJSON *ready; /* healthcheck table from `ready`, or NULL */
  int ndeps;
  int deps[SS_STACK_MAX_SERVICES];
} ss_svc;

typedef struct ss_stack_model {
  const cJSON *opts;
  char project[96];
  const char *session_key;
  const char *sandbox_name, *forwarder_name, *forwarder_image;
  int agent_port;
  int internal; /* the sandbox network is Internal (default) */
  int nsvc;
  ss_svc svc[SS_STACK_MAX_SERVICES];
  int order[SS_STACK_MAX_SERVICES]; /* dependencies first */
  int sandbox_idx, proxy_idx;       /* proxy_idx -1 without a proxy */
} ss_stack_model;

int ss_stack_model_build(const cJSON *opts, const char *session_key, ss_stack_model *m,
                         ss_error *err);

/* Small readers shared by validate.c and plan.c. */
int ss_is_list(const cJSON *v); /* an array, or {} (how an empty Lua table arrives) */
int ss_list_size(const cJSON *v);
/* Parses "512m"-style sizes or plain numbers into bytes; -1 when malformed. */
double ss_parse_size(const cJSON *v);

#endif
