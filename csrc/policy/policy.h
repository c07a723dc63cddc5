#ifndef SANDSTACK_POLICY_H
#define SANDSTACK_POLICY_H
/* The egress policy language (spec 001 "Network access"), shared by both backends: the Docker
 * stack hands the rendered policy to its egress proxy, the sbx backend turns the rules into
 * sbx policy commands. Validation refuses anything ambiguous; matching denies anything it
 * cannot read with certainty. No global state: a policy is an immutable value once built. */
#include <cjson/cJSON.h>
#include <stddef.h>

#include "util/error.h"

#define SS_POLICY_MAX_RULES 256
#define SS_POLICY_MAX_PATHS 32
#define SS_POLICY_MAX_JSON (1u << 20)
#define SS_HOST_MAX 253
#define SS_PATH_MAX 1024

/* Method bits; SS_M_ANY stands alone. A rule with methods == 0 names no method (every one). */
enum {
  SS_M_GET = 1u << 0,
  SS_M_HEAD = 1u << 1,
  SS_M_POST = 1u << 2,
  SS_M_PUT = 1u << 3,
  SS_M_PATCH = 1u << 4,
  SS_M_DELETE = 1u << 5,
  SS_M_OPTIONS = 1u << 6,
  SS_M_CONNECT = 1u << 7,
  SS_M_TRACE = 1u << 8,
  SS_M_ANY = 1u << 9,
};
#define SS_M_COUNT 10

typedef struct ss_policy_rule {
  char host[SS_HOST_MAX + 1]; /* lowercase; for a wildcard the apex (without "*.") */
  int wildcard;               /* "*.apex": subdomains at any depth, never the apex itself */
  int port;                   /* 0: every port */
  unsigned methods;           /* 0: every method */
  int npaths;                 /* 0: every path */
  char *paths[SS_POLICY_MAX_PATHS];
  int raw; /* "raw": true: a CONNECT tunnel to this host and (named) port may carry any bytes; without
              it a tunnel must start with a TLS ClientHello naming the host (docs/policy.md) */
  char *reason; /* "reason": the policy author's words for a refusal this rule decides, returned to the
                   client as given (NULL when none); printable ASCII, so a header can carry it */
} ss_policy_rule;

#define SS_POLICY_REASON_MAX 200

/* One address of "allow_private": an address in a refused range (address.h) that the proxy may
 * connect to when a name an allow rule admits resolves to it, on one port or every port. */
#define SS_POLICY_MAX_PRIVATE 64
typedef struct ss_policy_private {
  char address[46]; /* canonical text (ss_address_text), as a resolved address is compared */
  int port;         /* 0: every port */
} ss_policy_private;

typedef struct ss_policy {
  int n;
  ss_policy_rule *rules;
  int nprivate;
  ss_policy_private *allow_private; /* "allow_private": what the operator named, nothing more */
  int no_inspect; /* "inspect": false: a proxy never terminates TLS, so method and path rules
                     cannot be enforced on HTTPS and such hosts are refused over CONNECT */
  int ask;        /* "ask": true: a request no rule admits is held while the host decides (the proxy's ask.c) */
  int ask_timeout; /* "ask_timeout": seconds an ask is held before it is refused (1..3600; 30 when absent) */
} ss_policy;

#define SS_POLICY_ASK_TIMEOUT 30
#define SS_POLICY_ASK_TIMEOUT_MAX 3600

/* Why a query was refused (or SS_DENY_NONE when admitted). */
typedef enum {
  SS_DENY_NONE = 0,
  SS_DENY_HOST,       /* no rule names this host and port */
  SS_DENY_METHOD,     /* a rule names the host, none of them this method */
  SS_DENY_PATH,       /* a rule names the host and method, none of them this path */
  SS_DENY_BAD_HOST,   /* the host is not in canonical form (case aside) */
  SS_DENY_BAD_METHOD, /* the method is not a token */
  SS_DENY_BAD_PATH,   /* the path could mean something other than it reads (dot segments, %2f...) */
} ss_deny_reason;

typedef struct ss_policy_verdict {
  int admitted;
  int rule; /* 1-based: the admitting rule, or for a refusal the first rule naming the host; 0 none */
  ss_deny_reason reason;
  int raw; /* a connection (method NULL) that is admitted: the first raw rule covering its host and
              port (1-based), whose bytes need not be TLS; 0 when no raw rule does */
  const ss_policy_rule *named; /* rules[rule - 1], or NULL: valid while the policy checked is (a refusal
                                  reads its methods, paths and reason to say what could be allowed) */
} ss_policy_verdict;

/* Builds a policy from {"allow": [rule...]} (optional "version": 1, optional "inspect": bool,
 * default true: whether a proxy may terminate TLS to enforce method and path rules; optional
 * "ask": bool and "ask_timeout": whole seconds, which needs "ask"; optional "allow_private": a
 * list of "address" or "address:port" ("[v6]:port"), each in a refused range). A rule is a string
 * "host", "host:port", "*.apex[:port]" or an object {host, port?, methods?, paths?, raw?, reason?}; a
 * raw rule names its port and has no methods or paths; reason is 1..SS_POLICY_REASON_MAX bytes of
 * printable ASCII (space to '~').
 * On failure returns NULL with err kind "invalid" and field "rule" (1-based) when one rule
 * is at fault. */
ss_policy *ss_policy_from_json(const cJSON *root, ss_error *err);
/* The same from text (at most SS_POLICY_MAX_JSON bytes, need not be NUL-terminated). */
ss_policy *ss_policy_parse(const char *buf, size_t len, ss_error *err);
void ss_policy_free(ss_policy *p);

/* host: any case, no port; method: NULL for a non-HTTP connection; path: NULL likewise, may
 * carry "?query"; port: 0 when unknown (then only rules without a port apply). */
void ss_policy_check(const ss_policy *p, const char *host, size_t host_len, const char *method,
                     size_t method_len, const char *path, size_t path_len, int port,
                     ss_policy_verdict *out);
const char *ss_deny_reason_name(ss_deny_reason r);

/* Whether the policy names exactly this address (canonical text) on this port: an allow_private
 * entry, or a rule that is not a wildcard naming the literal (an entry or a rule without a port
 * names every port). The proxy's exception for addresses it otherwise refuses to connect to
 * (csrc/policy/address.h) holds only then. */
int ss_policy_names_address(const ss_policy *p, const char *address, int port);

/* "allow_private" (csrc/policy/private.c): one entry's text -> *out, or NULL; else why not. */
const char *ss_policy_private_parse(const char *s, ss_policy_private *out);
/* The entry as text: "address", "address:port" or "[v6]:port" (out: SS_POLICY_PRIVATE_TEXT bytes). */
#define SS_POLICY_PRIVATE_TEXT 56
void ss_policy_private_text(const ss_policy_private *e, char *out, size_t cap);

/* The canonical JSON form: {"version":1,"allow":[{"host","port"?,"methods"?,"paths"?,"raw"?,"reason"?}...]},
 * plus "inspect":false when inspection is off (absent means on), "ask":true and "ask_timeout" when asking,
 * "allow_private":[text...] when it names any address.
 * ss_policy_parse of it builds an equal policy. */
cJSON *ss_policy_render(const ss_policy *p);
/* One rule as a JSON object (host with "*." for a wildcard). */
cJSON *ss_policy_rule_json(const ss_policy_rule *r);

/* How an sbx host resource ("x", "*.x" one level below x, "**.x" x and every depth below it,
 * "**", each with an optional ":port"; any case, a trailing dot ignored) relates to what p
 * admits (csrc/policy/coverage.c): */
typedef enum {
  SS_COVER_ALL,      /* "**" (or "*"): every host */
  SS_COVER_COVERED,  /* only hosts that plain rules of p admit on every port, method and path */
  SS_COVER_WIDER,    /* a host p names, and more (or less than every request to it) */
  SS_COVER_DISJOINT, /* no host p names */
  SS_COVER_GLOB,     /* a glob beyond those forms ("api?.x", "api[!1].x", "a*.x"): no exact deny exists */
  SS_COVER_APEX_DENIED, /* "**.x": x's subdomains covered, x itself denied for the sandbox (p has "*.x") */
} ss_coverage;
ss_coverage ss_policy_coverage(const ss_policy *p, const char *resource, size_t len);
const char *ss_coverage_name(ss_coverage c);
/* Whether an sbx host pattern (as above) matches any host p names, on any port, method or
 * path. A pattern the policy language cannot read reaches everything (1). */
int ss_policy_pattern_reaches(const ss_policy *p, const char *pattern, size_t len);

/* Pieces, exposed for the tests and the fuzz target. */
/* Lowercases src into out (SS_HOST_MAX+1 bytes); returns 0 when src is a valid DNS name or
 * canonical IPv4 address, else -1 with a reason in *why. */
int ss_host_normalize(const char *src, size_t len, char *out, const char **why);
int ss_host_covered(const ss_policy_rule *r, const char *host);
/* The port spelled by the n bytes at d (1..65535, no sign, no leading zero) into *port; else why not. */
const char *ss_port_text(const char *d, size_t n, int *port);
/* s holds n >= 1 bytes, each a decimal digit. */
int ss_all_digits(const char *s, size_t n);
unsigned ss_method_bit(const char *m, size_t len);
const char *ss_method_name(unsigned bit);
int ss_path_rule_valid(const char *p, const char **why);
int ss_path_query_valid(const char *p, size_t len);
int ss_path_matches(const char *rule, const char *path, size_t len);

#endif
