/* The options of sandstack.docker.start, one X-macro list per level: name, type, default and
 * "refused when", the cells of its table in docs/api/docker.md. The validator's key lists
 * (validate.c, credentials.c, ports.c) and the rows core.stack_options hands the docs'
 * generator (scripts/api_tables.lua) both expand these lists, so an option cannot be accepted
 * without a row, nor documented without being accepted. Each X(name, type, default, refused). */
#ifndef SS_STACK_OPTIONS_H
#define SS_STACK_OPTIONS_H

#include <stddef.h>

typedef struct {
  const char *name, *type, *def, *refused;
} ss_option_doc;

/* The rows of one level ("start", "service", "mount", "volume", "ready", "network", "port",
 * "credential") in the table's order, *n of them; NULL for an unknown level. */
const ss_option_doc *ss_stack_option_docs(const char *level, size_t *n);

#define SS_OPTION_NAME(name, type, def, refused) name,
#define SS_OPTION_DOC(name, type, def, refused) {name, type, def, refused},

/* sandstack.docker.start */
#define SS_OPTIONS_START(X) \
  X("agent_port", "integer",\
    "required",\
    "missing, or outside 1-65535") \
  X("image", "string",\
    "—",\
    "the sandbox's when `services` has no `sandbox_service` entry; neither: `missing_image`") \
  X("services", "list of service tables",\
    "`{}`",\
    "see \"services\" below") \
  X("sandbox_service", "string",\
    "`\"sandbox\"`",\
    "not a DNS label (`invalid_name`)") \
  X("forwarder_service", "string",\
    "`\"forwarder\"`",\
    "not a DNS label (`invalid_name`)") \
  X("forwarder_image", "string",\
    "`\"sandstack/socat:<version>\"` (built by `sandstack images`)",\
    "not a string") \
  X("ready_path", "string or `false`",\
    "`\"/health\"`",\
    "does not start with `/`; `false`: no HTTP wait") \
  X("ready_timeout", "seconds",\
    "`60`",\
    "not a number above 0") \
  X("health_timeout", "seconds",\
    "`60`",\
    "not a number above 0") \
  X("timeout", "seconds",\
    "the engine client's (30)",\
    "not a number above 0: the deadline of each Engine request") \
  X("docker_host", "string",\
    "`$DOCKER_HOST`, else `unix:///var/run/docker.sock`",\
    "not a string") \
  X("capture_path", "string",\
    "none (`stack:capture` then returns `invalid`/`no_capture_path`)",\
    "not absolute") \
  X("req_adapter", "function",\
    "built in",\
    "not a function: `function(req) return res end`, every HTTP call to the agent") \
  X("on_event", "function",\
    "none",\
    "not a function: called with `{ phase =, service =, elapsed =, ... }`") \
  X("project_name", "string",\
    "`\"sandstack-\" .. session_key`",\
    "not an engine name, or over 64 characters") \
  X("network", "table",\
    "`{ internal = true, driver = \"bridge\", options = {} }`",\
    "see \"network\" below") \
  X("volumes", "list",\
    "`{}`",\
    "see \"volumes\" below") \
  X("ready", "table, service name to healthcheck",\
    "`{}`",\
    "see \"ready\" below") \
  X("pull", "string",\
    "`\"missing\"`",\
    "not `\"missing\"`, `\"never\"` or `\"always\"`") \
  X("cpus", "number",\
    "unlimited",\
    "not above 0") \
  X("memory", "bytes or `\"512m\"`-style string",\
    "unlimited",\
    "under 4 MiB or unparsable") \
  X("cap_drop", "list of strings",\
    "`{ \"ALL\" }`",\
    "not a list of strings; `{}` drops nothing") \
  X("security_opt", "list of strings",\
    "`{ \"no-new-privileges\" }`",\
    "not a list of strings") \
  X("pids_limit", "integer or `false`",\
    "`512`",\
    "not a positive integer; `false` is no limit") \
  X("user", "string",\
    "the image's",\
    "not a string") \
  X("readonly_rootfs", "boolean",\
    "the engine's (writable)",\
    "not a boolean") \
  X("tmpfs", "list of paths, or path to mount options",\
    "none",\
    "anything else") \
  X("runtime", "string",\
    "the engine's default",\
    "not a runtime name (`\"runsc\"`); one the engine lacks: `engine`/`runtime_missing`") \
  X("subnet_pool", "string, IPv4 CIDR",\
    "the engine's pools",\
    "not a CIDR of /28 or larger") \
  X("proxy_service", "string",\
    "none",\
    "names no service (`unknown_proxy_service`); that service lacks egress (`proxy_needs_egress`)") \
  X("egress_policy", "table or compiled `sandstack.policy`",\
    "none",\
    "not a table, or a rule `sandstack.policy.compile` refuses (`cause` holds its error)") \
  X("api_key", "string",\
    "none",\
    "the model key, held by the added proxy's credential route (without it: a plain allowlist proxy); never in a record") \
  X("session_token", "string",\
    "minted (64 hex)",\
    "not 32-256 characters of `A-Z a-z 0-9 - . _ ~`, or no proxy to hold it") \
  X("proxy_image", "string",\
    "`\"sandstack/proxy:<version>\"`",\
    "given with a `proxy_service` (only for the proxy sandstack adds)") \
  X("proxy_hosts", "table, name to IPv4/IPv6 address",\
    "none",\
    "not host names or addresses; only for the added proxy (a private address needs `allow_private`)") \
  X("proxy_upstream", "string, `http(s)://host[:port]`",\
    "the Anthropic API",\
    "not such an origin; only for the added proxy") \
  X("proxy_upstream_ca", "string, PEM",\
    "the system roots",\
    "not PEM; only for the added proxy") \
  X("credentials", "list of credential tables",\
    "none",\
    "see \"credentials\" below; only for the added proxy") \
  X("ports", "list",\
    "none",\
    "see \"ports\" below; refused on a swarm")
/* sandstack.docker.start services */
#define SS_OPTIONS_SERVICE(X) \
  X("name", "string",\
    "required",\
    "not a DNS label (`invalid_name`); twice (`duplicate_service`)") \
  X("image", "string",\
    "required",\
    "missing") \
  X("egress", "`\"none\"` or `\"allow\"`",\
    "required on every sidecar",\
    "missing on a sidecar (`egress_required`); `\"allow\"` on the sandbox (`sandbox_egress_forbidden`)") \
  X("entrypoint", "string or list",\
    "the image's",\
    "a string is a one-element list") \
  X("command", "string or list",\
    "the image's",\
    "a string runs through `/bin/sh -c`") \
  X("env", "table, name to string",\
    "`{}`",\
    "not strings; the sandbox's `AGENT_PORT` is always sandstack's") \
  X("volumes", "list of mounts",\
    "`{}`",\
    "see the next table") \
  X("depends_on", "list of service names",\
    "`{}`",\
    "names no service (`unknown_dependency`); a cycle (`dependency_cycle`)") \
  X("user", "string",\
    "the image's",\
    "differs from a stack-wide `user`") \
  X("port", "integer",\
    "none",\
    "read for the `proxy_service` only, where it is required") \
  X("hosts", "table, name to address",\
    "none",\
    "not RFC 1123 names or IP addresses")
/* sandstack.docker.start services volumes */
#define SS_OPTIONS_MOUNT(X) \
  X("name", "string",\
    "required",\
    "names no entry of the top-level `volumes`") \
  X("target", "string",\
    "required",\
    "not absolute") \
  X("read_only", "boolean",\
    "`false`",\
    "not a boolean")
/* sandstack.docker.start volumes */
#define SS_OPTIONS_VOLUME(X) \
  X("name", "string",\
    "required",\
    "not a DNS label; created as `<project>-<name>`, removed with the stack")
/* sandstack.docker.start ready */
#define SS_OPTIONS_READY(X) \
  X("test", "string (run as `CMD-SHELL`) or list",\
    "none",\
    "a test that can never pass (`{ \"NONE\" }`)") \
  X("log", "string",\
    "none",\
    "empty or over 1024 bytes") \
  X("times", "count",\
    "`1`",\
    "without `log`; outside 1-1000") \
  X("port", "integer",\
    "none",\
    "outside 1-65535") \
  X("interval", "seconds",\
    "the engine's (30)",\
    "not above 0") \
  X("timeout", "seconds",\
    "the engine's (30)",\
    "not above 0") \
  X("retries", "count",\
    "the engine's (3)",\
    "not a whole number") \
  X("start_period", "seconds",\
    "`0`",\
    "below 0")
/* sandstack.docker.start network */
#define SS_OPTIONS_NETWORK(X) \
  X("internal", "boolean",\
    "`true`",\
    "`false` must be typed out: the sandbox then reaches the internet") \
  X("driver", "string",\
    "`\"bridge\"`",\
    "not a string") \
  X("options", "table of strings",\
    "`{}`",\
    "not strings")
/* sandstack.docker.start ports */
#define SS_OPTIONS_PORT(X) \
  X("port", "integer (or a bare number)",\
    "required",\
    "outside 1-65535; twice for one service") \
  X("host_port", "integer",\
    "ephemeral",\
    "outside 1-65535; chosen twice; held already: `conflict`/`port_taken`") \
  X("service", "string",\
    "the sandbox",\
    "names no service")
/* sandstack.docker.start credentials */
#define SS_OPTIONS_CREDENTIAL(X) \
  X("name", "string",\
    "required",\
    "not an environment name, or one sandstack sets (`AGENT_PORT`, `HTTP_PROXY`, `SANDSTACK_*`, ...)") \
  X("host", "string",\
    "required",\
    "not a host name the `egress_policy` admits (any host under `ask = true`)") \
  X("port", "integer",\
    "`443`",\
    "outside 1-65535") \
  X("header", "string",\
    "—",\
    "not a header name") \
  X("format", "string with one `%s`",\
    "`\"%s\"`",\
    "without exactly one `%s`; only with `header`") \
  X("query", "string",\
    "—",\
    "not a parameter name") \
  X("basic", "string, the user name",\
    "—",\
    "contains `:`") \
  X("path", "string with one `%s`",\
    "—",\
    "not a path with one `%s`") \
  X("secret", "string",\
    "required at start (a pool's: below)",\
    "empty; never in a record")


#endif
