#ifndef SANDSTACK_STACK_MODEL_H
#define SANDSTACK_STACK_MODEL_H
/* The validated options, normalised: what validate.c hands to plan.c. Strings and cJSON
 * pointers are borrowed from the options tree, which must outlive the model. */
#include "policy/policy.h"
#include "stack/stack.h"
#include "util/version.h"

typedef struct ss_svc {
  const char *name;
  const cJSON *spec;  /* the service table, or NULL for a sandbox synthesised from `image` */
  const char *image;
  int egress_allow;
  int is_sandbox;
  int port;           /* proxy port, 0 when not the proxy */
  const cJSON *ready; /* healthcheck table from `ready`, or NULL */
  const cJSON *hosts; /* name -> address map (ExtraHosts), or NULL */
  int added;          /* the egress proxy sandstack adds for egress_policy (no spec of its own) */
  int ndeps;
  int deps[SS_STACK_MAX_SERVICES];
} ss_svc;

/* The stack-wide hardening, as validated: every container's HostConfig starts from it. */
typedef struct ss_hardening {
  double nano_cpus;          /* 0: no limit */
  double memory;             /* bytes; 0: no limit */
  double pids_limit;         /* 0: no limit (pids_limit = false) */
  const cJSON *cap_drop;     /* list (possibly empty); NULL: the default, ALL */
  const cJSON *security_opt; /* list (possibly empty); NULL: the default, no-new-privileges */
  int readonly_rootfs;       /* -1 unset, 0, 1 */
  const cJSON *tmpfs;        /* a list of paths or a map path -> options; NULL: none */
  const char *user;          /* NULL: the image's */
} ss_hardening;

/* One entry of the `credentials` option, checked (credentials.c). The secret is borrowed from
 * the options tree; the placeholder is minted by ss_stack_mint_placeholders. */
#define SS_STACK_MAX_CREDENTIALS 32
#define SS_CRED_SECRET_MIN 16
#define SS_CRED_SECRET_MAX 4096
typedef struct ss_cred {
  const char *name;          /* the sandbox's variable */
  char host[SS_HOST_MAX + 1]; /* normalised: lowercase, no trailing dot */
  int port;                  /* 443 unless given */
  const char *placement;     /* "header", "query", "basic" or "path" */
  const char *where;         /* that placement's value: header name, parameter, user, template */
  const char *format;        /* header only; NULL: the secret alone */
  const char *secret;
  char placeholder[SS_CRED_SECRET_MAX + 1]; /* as long as the secret, [A-Za-z0-9] */
} ss_cred;

/* One entry of the `ports` option (ports.c): a port of a service published on the host's
 * 127.0.0.1 through a forwarder of its own, on a host port chosen (host_port) or ephemeral (0). */
#define SS_STACK_MAX_PORTS 16
typedef struct ss_port {
  int svc;       /* index into svc[] */
  int port;      /* in the service */
  int host_port; /* 0: ephemeral */
  char forwarder[140]; /* the service name of its forwarder container */
} ss_port;

typedef struct ss_stack_model {
  const cJSON *opts;
  char project[96];
  const char *session_key;
  const char *sandbox_name, *forwarder_name, *forwarder_image;
  int agent_port;
  int internal; /* the sandbox network is Internal (default) */
  const char *runtime; /* engine runtime for every container ("runsc"), NULL for the default */
  ss_hardening hard;
  int nsvc;
  ss_svc svc[SS_STACK_MAX_SERVICES];
  int order[SS_STACK_MAX_SERVICES]; /* dependencies first */
  int sandbox_idx, proxy_idx;       /* proxy_idx -1 without a proxy */
  const char *proxy_upstream;       /* the added proxy's SANDSTACK_UPSTREAM, or NULL (its default) */
  const char *proxy_upstream_ca;    /* the added proxy's SANDSTACK_UPSTREAM_CA (PEM text), or NULL */
  int inspect_ca; /* the added proxy inspects TLS: the CA volume and its wiring (inspect.c) */
  int ncreds;
  ss_cred creds[SS_STACK_MAX_CREDENTIALS];
  int agent_host_port; /* the agent's forwarder on a chosen host port; 0: ephemeral */
  int nports;          /* the other published ports, each with a forwarder of its own */
  ss_port ports[SS_STACK_MAX_PORTS];
} ss_stack_model;

/* The proxy sandstack adds when egress_policy comes without a proxy_service. */
#define SS_PROXY_NAME "proxy"
#define SS_PROXY_PORT 3128
/* The default images: built locally by `sandstack images` (lua/sandstack/docker/images.lua),
 * so a stack needs no registry. */
#define SS_DEFAULT_PROXY_IMAGE "sandstack/proxy:" SANDSTACK_VERSION
#define SS_DEFAULT_FORWARDER_IMAGE "sandstack/socat:" SANDSTACK_VERSION

/* TLS inspection (inspect.c). The added proxy makes the stack's CA in its own memory
 * and publishes only certificates into a per-stack volume: read-write in the proxy, read-only in
 * the sandbox, whose TLS clients are pointed at the bundle by these variables. */
#define SS_CA_VOLUME_KEY "ca" /* the volume is <project>-ca */
#define SS_CA_PROXY_DIR "/run/sandstack/ca"
#define SS_CA_SANDBOX_DIR "/etc/sandstack/ca"
#define SS_CA_BUNDLE SS_CA_SANDBOX_DIR "/bundle.pem"
#define SS_CA_READY_TEST "sandstack-proxy" /* run as `sandstack-proxy --ready` (csrc/proxy/main.c) */
extern const char *const SS_CA_BUNDLE_VARS[]; /* NULL-terminated */

/* Checks the inspection options against the model (after the proxy is known) and sets
 * m->inspect_ca and m->proxy_upstream_ca. 0, or -1 with compose/invalid_option. */
int ss_stack_check_inspection(const cJSON *opts, ss_stack_model *m, ss_error *err);
/* The CA volume's DriverOpts: a tmpfs owned by the proxy's user (so the certificates never
 * touch the disk and vanish when no container holds the volume). Caller owns the result. */
cJSON *ss_stack_ca_volume_opts(const ss_stack_model *m);
/* credentials.c: the `credentials` option checked into m->creds (after the proxy is known);
 * 0, or -1 with compose/invalid_option naming credentials[i].field (never quoting a secret). */
int ss_stack_check_credentials(const cJSON *opts, ss_stack_model *m, ss_error *err);
/* ports.c: the `ports` option checked into m->ports and m->agent_host_port (after the services
 * are known); 0, or -1 with compose/invalid_option naming ports[i] (duplicate_service when a
 * forwarder's name is a service's). */
int ss_stack_check_ports(const cJSON *opts, ss_stack_model *m, ss_error *err);
/* The plan's `ports` (service, port, host_port, forwarder) and, with a chosen host port, the
 * preflight read of the engine's published ports (`port_check`). */
void ss_stack_plan_ports(cJSON *plan, const ss_stack_model *m);

/* Mints every credential's placeholder from the kernel CSPRNG; 0, or -1 with io/random. */
int ss_stack_mint_placeholders(ss_stack_model *m, ss_error *err);
/* A credential as JSON: with secret, the entry of SANDSTACK_CREDENTIALS; with NULL, what a plan
 * and a record show (no secret member). Caller owns the result. */
cJSON *ss_stack_credential_json(const ss_cred *cr, const char *secret);
/* The compiled egress_policy (egress.c): NULL without err set when there is none. */
ss_policy *ss_stack_compile_policy(const cJSON *opts, ss_error *err);

/* Builds the plan of a model built by ss_stack_model_build (no second validation). NULL with err
 * set on failure. Caller owns the result. */
cJSON *ss_stack_plan_model(const ss_stack_model *m, const ss_stack_ctx *ctx, ss_error *err);
/* The same in two halves, for a plan re-expressed for another engine (swarm_plan.c): the draft
 * holds every create's body as an object under "body"; finishing turns each into a request
 * (method, path, body_json) and adds the bodiless requests (requests.c). */
cJSON *ss_stack_plan_draft(const ss_stack_model *m, const ss_stack_ctx *ctx, ss_error *err);
void ss_stack_plan_finish(cJSON *plan);

int ss_stack_model_build(const cJSON *opts, const char *session_key, ss_stack_model *m,
                         ss_error *err);

/* hosts.c: a `hosts`/`proxy_hosts` map checked (0, or -1 with invalid_option naming option),
 * and turned into sorted ExtraHosts lines (NULL when absent or empty). */
int ss_stack_check_hosts(const cJSON *v, const char *option, ss_error *err);
cJSON *ss_stack_extra_hosts(const cJSON *v);

/* Parses "512m"-style sizes or plain numbers into bytes; -1 when malformed (validate.c). */
double ss_parse_size(const cJSON *v);

/* option_type.c: the readers the checks share (validate.c and the checks it calls). */
int ss_is_list(const cJSON *v); /* an array, or {} (how an empty Lua table arrives) */
int ss_list_size(const cJSON *v);
/* A value of the wrong type (docs/api/README.md: a programming error, which the binding raises
 * at the caller): kind "usage", reason "bad_type", `option`; "sandstack.docker.start: option
 * 'OPTION' must be WANTED, got <what>", never quoting a secret. Returns -1. */
int ss_stack_fail_type(ss_error *err, const char *option, const char *wanted, const cJSON *v);
/* ", got string \"8080\"" (n bytes at buf): what a check refused, for its message; a secret's
 * value (an option named like a key, token or secret) is never quoted, only its type. */
const char *ss_stack_got(const cJSON *v, const char *option, char *buf, size_t n);

#endif
