/* The control socket: how the host changes a running proxy's policy. It is a unix
 * socket on no TCP port and on no volume, so nothing in the sandbox (another container, another
 * network namespace, another mount namespace) can name it. SANDSTACK_CONTROL_SOCKET names it:
 * "@name" (the image's default, @sandstack-control) is the abstract namespace, which belongs to
 * the proxy container's own network namespace and leaves no file in its filesystem; a path is
 * a socket file 0600 in a directory of mode 0700 that the proxy makes itself.
 * The host reaches it by an Engine exec of `sandstack-proxy --control VERB` inside the proxy's
 * container (control_client.c). A peer must also run as the proxy's own uid (SO_PEERCRED).
 *
 * One request per connection: {"verb": "...", "payload": "..."} up to EOF, then one JSON line
 * back and the close. Verbs: "egress" (the policy in force and its digest), "set-egress" (the
 * payload is a rendered policy: parsed, checked, swapped in; live_policy.c closes the tunnels
 * it no longer admits), "set-credentials" (the payload is SANDSTACK_CREDENTIALS, where an entry named
 * ANTHROPIC_API_KEY with only a secret replaces the credential route's model key: parsed,
 * checked, swapped in), "set-model-key" (the payload is the model key alone; the other
 * credentials stay), "egress-asks" (the requests held for an answer, ask.c) and "egress-answer"
 * (the payload answers one). Every change is an audit line with the old and new digest; a refused
 * change changes nothing. The listening handle is unreferenced: it never keeps the loop (and so
 * a drained proxy) alive. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxy/ask.h"
#include "proxy/audit.h"
#include "proxy/control.h"
#include "proxy/credentials.h"
#include "proxy/live_policy.h"
#include "proxy/server.h"
#include "proxy/tls.h"
#include "util/buf.h"

#define CONTROL_MAX_REQUEST (8u << 20) /* a policy is at most 1 MiB rendered; room for escaping */
#define CONTROL_DEADLINE_MS 10000

struct control_server {
  uv_pipe_t listener;
  proxy_server *srv;
  char path[108];
};

typedef struct control_peer {
  uv_pipe_t pipe;
  uv_timer_t timer;
  uv_write_t write;
  proxy_server *srv;
  ss_buf in; /* the request, at most CONTROL_MAX_REQUEST + 1 (one byte more is too large) */
  char *answer;
  int open_handles, answered;
} control_peer;

static void peer_freed(uv_handle_t *h) {
  control_peer *p = h->data;
  if (--p->open_handles) return;
  ss_buf_wipe(&p->in); /* set-credentials carries secrets */
  free(p->answer);
  free(p);
}

static void peer_close(control_peer *p) {
  if (uv_is_closing((uv_handle_t *)&p->pipe)) return;
  uv_close((uv_handle_t *)&p->pipe, peer_freed);
  uv_close((uv_handle_t *)&p->timer, peer_freed);
}

static void on_answer_written(uv_write_t *w, int status) {
  (void)status;
  peer_close(w->data);
}

static void answer(control_peer *p, cJSON *o) {
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  size_t n = line ? strlen(line) : 0;
  p->answer = line ? realloc(line, n + 2) : NULL;
  if (!p->answer) {
    free(line);
    return peer_close(p);
  }
  p->answer[n] = '\n';
  p->answered = 1;
  uv_buf_t b = uv_buf_init(p->answer, (unsigned)(n + 1));
  p->write.data = p;
  if (uv_write(&p->write, (uv_stream_t *)&p->pipe, &b, 1, on_answer_written) != 0) peer_close(p);
}

static cJSON *refusal(const char *error, const char *message) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 0);
  cJSON_AddStringToObject(o, "error", error);
  cJSON_AddStringToObject(o, "message", message);
  return o;
}

/* The audit line of a change (the stable schema, route "control"): what changed and the two
 * digests, never the content; for credentials, whether the model key was replaced (model_key
 * 0 or 1; -1 leaves the field out). */
static void audit_change(const proxy_server *s, const char *what, const char *old_digest, const char *new_digest,
                         size_t closed, int model_key) {
  cJSON *o = audit_line_start(s, "control", "allow");
  if (!o) return;
  cJSON_AddStringToObject(o, "event", what);
  cJSON_AddStringToObject(o, "old_digest", old_digest);
  cJSON_AddStringToObject(o, "new_digest", new_digest);
  cJSON_AddNumberToObject(o, "closed", (double)closed);
  if (model_key >= 0) cJSON_AddBoolToObject(o, "model_key", model_key);
  audit_line_emit(o);
}

/* Whether host is permitted by one name of the CA's constraints: the name itself, or for a DNS
 * name a subdomain of it (ca.c: a permitted DNS subtree; an IPv4 literal is one address). */
static int under(const char *host, const char *name) {
  size_t hl = strlen(host), nl = strlen(name);
  if (strcmp(host, name) == 0) return 1;
  return hl > nl && host[hl - nl - 1] == '.' && strcmp(host + hl - nl, name) == 0 && strspn(host, "0123456789.") != hl;
}

/* Whether the stack's CA, made at start, may vouch for host: it names the hosts the start policy
 * inspected and the start credentials' hosts (ca_name_constraints). */
static int ca_covers(const proxy_config *cfg, const char *host) {
  for (int i = 0; i < cfg->policy->n; i++)
    if (ca_rule_needs_inspection(&cfg->policy->rules[i]) && under(host, cfg->policy->rules[i].host)) return 1;
  for (size_t i = 0; cfg->creds && i < cfg->creds->n; i++)
    if (!cfg->creds->e[i].legacy && under(host, cfg->creds->e[i].host)) return 1;
  return 0;
}

/* A policy the running proxy can serve as written: a host it would inspect needs a leaf the
 * stack's CA may sign, and that CA's name constraints were fixed at start. */
static int servable(const proxy_server *s, const ss_policy *p, char *why, size_t n) {
  if (!s->tls || !s->tls->ca || p->no_inspect) return 1;
  for (int i = 0; i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    if (!ca_rule_needs_inspection(r) || ca_covers(s->cfg, r->host)) continue;
    snprintf(why, n,
             "rule %d names methods or paths on %s%s, so its HTTPS needs TLS inspection, but the stack's inspection CA "
             "was made at start for the hosts the start policy inspected and cannot vouch for this one; start the "
             "stack with a policy that inspects it",
             i + 1, r->wildcard ? "*." : "", r->host);
    return 0;
  }
  return 1;
}

static cJSON *verb_egress(proxy_server *s) {
  char digest[65] = "";
  policy_digest(s->policy, digest);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON *r = ss_policy_render(s->policy);
  char *text = r ? cJSON_PrintUnformatted(r) : NULL;
  cJSON_AddItemToObject(o, "policy", r);
  if (text) cJSON_AddStringToObject(o, "rendered", text); /* the digest's input, byte for byte */
  free(text);
  cJSON_AddStringToObject(o, "digest", digest);
  return o;
}

static cJSON *verb_set_egress(proxy_server *s, const cJSON *payload) {
  if (!cJSON_IsString(payload)) return refusal("invalid_policy", "set-egress needs the rendered policy as its payload");
  ss_error e;
  ss_error_init(&e);
  ss_policy *next = ss_policy_parse(payload->valuestring, strlen(payload->valuestring), &e);
  if (!next) {
    cJSON *o = refusal("invalid_policy", e.message);
    const cJSON *rule = e.fields ? cJSON_GetObjectItemCaseSensitive(e.fields, "rule") : NULL;
    if (cJSON_IsNumber(rule)) cJSON_AddNumberToObject(o, "rule", rule->valuedouble);
    ss_error_clear(&e);
    return o;
  }
  char why[700];
  if (!servable(s, next, why, sizeof why)) {
    ss_policy_free(next);
    return refusal("needs_restart", why);
  }
  char old_digest[65] = "", new_digest[65] = "";
  size_t closed = live_policy_swap(s, next, old_digest, new_digest);
  if (closed == (size_t)-1) return refusal("internal", "out of memory; the old policy stays in force");
  audit_change(s, "policy_changed", old_digest, new_digest, closed, -1);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddStringToObject(o, "old_digest", old_digest);
  cJSON_AddStringToObject(o, "digest", new_digest);
  cJSON_AddNumberToObject(o, "closed", (double)closed);
  return o;
}

/* A digest of a credentials table without its secrets: name, host, port, place and placeholder
 * of each entry (the placeholder is in the sandbox already). A new secret under the same name
 * and placeholder keeps the digest: the audit line says a change happened, never what. */
static void creds_digest(const proxy_creds *t, char out[65]) {
  static const char *const places[] = {"header", "query", "basic", "path"};
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; t && i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (e->legacy) continue;
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", e->name);
    cJSON_AddStringToObject(x, "host", e->host);
    cJSON_AddNumberToObject(x, "port", e->port);
    cJSON_AddStringToObject(x, "place", places[e->place]);
    if (e->field) cJSON_AddStringToObject(x, "field", e->field);
    if (e->format) cJSON_AddStringToObject(x, "format", e->format);
    cJSON_AddStringToObject(x, "placeholder", e->placeholder);
    cJSON_AddItemToArray(a, x);
  }
  char *text = cJSON_PrintUnformatted(a);
  cJSON_Delete(a);
  sha256_hex(text ? text : "", out);
  free(text);
}

/* The credentials a running proxy can serve: each host is inspected, so it needs a CA whose
 * constraints (fixed at start) name it. */
static int creds_servable(const proxy_server *s, const proxy_creds *t, char *why, size_t n) {
  for (size_t i = 0; i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (e->legacy) continue;
    if (!s->tls || !s->tls->ca) {
      snprintf(why, n, "credential %s needs TLS inspection of %s, but this proxy has no inspection CA (%s); start "
               "the stack with credentials", e->name, e->host, s->tls && s->tls->off_reason ? s->tls->off_reason : "none was made");
      return 0;
    }
    if (!ca_covers(s->cfg, e->host)) {
      snprintf(why, n, "credential %s is for %s, but the stack's inspection CA was made at start for other hosts and "
               "cannot vouch for this one; start the stack with a credential for it", e->name, e->host);
      return 0;
    }
  }
  return 1;
}

/* The payload is SANDSTACK_CREDENTIALS (the whole table, secrets included), in which an entry
 * {"name":"ANTHROPIC_API_KEY","secret":...} replaces the credential route's model key
 * (creds_parse_live); the route's own entry is added again with that key, or with the key in
 * force when the table names none: a table of other credentials never brings back the start's
 * key. Its placeholder stays the session token. cred_flow.c and credential.c look srv->creds up
 * on every call, so freeing the old table here leaves nothing pointing into it. */
static cJSON *verb_set_credentials(proxy_server *s, const cJSON *payload) {
  if (!cJSON_IsString(payload)) return refusal("invalid_credentials", "set-credentials needs the credentials as its payload");
  char why[700], *model_key = NULL;
  proxy_creds *next = creds_parse_live(payload->valuestring, strlen(payload->valuestring), &model_key, why, sizeof why);
  if (!next) return refusal("invalid_credentials", why);
  const proxy_config *cfg = s->cfg;
  const char *key = model_key ? model_key : creds_model_key(s->creds);
  if (!key) key = cfg->key; /* none at all: a proxy started without the credential route stays without */
  int added = key ? creds_add_legacy(next, cfg->upstream_host, cfg->upstream_port, key, cfg->token) : 0;
  int replaced = model_key != NULL;
  if (model_key) memset(model_key, 0, strlen(model_key));
  free(model_key);
  if (added != 0) {
    creds_free(next);
    return refusal("internal", "out of memory; the credentials in force stay");
  }
  if (!creds_servable(s, next, why, sizeof why)) {
    creds_free(next);
    return refusal("needs_restart", why);
  }
  char old_digest[65], new_digest[65];
  creds_digest(s->creds, old_digest);
  creds_digest(next, new_digest);
  creds_free(s->creds);
  s->creds = next;
  audit_change(s, "credentials_changed", old_digest, new_digest, 0, replaced);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddStringToObject(o, "old_digest", old_digest);
  cJSON_AddStringToObject(o, "digest", new_digest);
  return o;
}

/* The payload is the model key alone: it replaces the credential route's key in the table in
 * force, whose other credentials stay (set-credentials replaces the whole table). */
static cJSON *verb_set_model_key(proxy_server *s, const cJSON *payload) {
  if (!cJSON_IsString(payload)) return refusal("invalid_credentials", "set-model-key needs the key as its payload");
  char why[300], digest[65];
  if (creds_set_model_key(s->creds, payload->valuestring, why, sizeof why) != 0)
    return refusal("invalid_credentials", why);
  creds_digest(s->creds, digest);
  audit_change(s, "credentials_changed", digest, digest, 0, 1);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddStringToObject(o, "digest", digest);
  return o;
}

static cJSON *verb_egress_asks(proxy_server *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddItemToObject(o, "asks", ask_list(s));
  return o;
}

/* Printable ASCII of at most max bytes, or absent (NULL): what an audit line and a header carry. */
static int printable(const cJSON *v, size_t max, const char **out) {
  *out = NULL;
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsString(v) || strlen(v->valuestring) > max) return -1;
  for (const char *q = v->valuestring; *q; q++)
    if (*q < 0x20 || *q > 0x7e) return -1;
  *out = v->valuestring;
  return 0;
}

/* The payload is {"id": n, "decision": "allow"|"deny", "remember": "once"|"session",
 * "reason": text?, "by": text?}: the pending ask n answered (ask.c). */
static cJSON *verb_egress_answer(proxy_server *s, const cJSON *payload) {
  cJSON *a = cJSON_IsString(payload) ? cJSON_Parse(payload->valuestring) : NULL;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
  const cJSON *decision = cJSON_GetObjectItemCaseSensitive(a, "decision");
  const cJSON *rem = cJSON_GetObjectItemCaseSensitive(a, "remember");
  const char *reason, *by, *error = NULL;
  if (!cJSON_IsNumber(id) || id->valuedouble < 1)
    error = "egress-answer needs {\"id\": a pending ask's id, \"decision\": \"allow\" or \"deny\"}";
  else if (!cJSON_IsString(decision) || (strcmp(decision->valuestring, "allow") && strcmp(decision->valuestring, "deny")))
    error = "decision must be \"allow\" or \"deny\"";
  else if (rem && !cJSON_IsNull(rem) &&
           (!cJSON_IsString(rem) || (strcmp(rem->valuestring, "once") && strcmp(rem->valuestring, "session"))))
    error = "remember must be \"once\" or \"session\"";
  else if (printable(cJSON_GetObjectItemCaseSensitive(a, "reason"), ASK_REASON_MAX, &reason))
    error = "reason must be at most 200 printable ASCII characters";
  else if (printable(cJSON_GetObjectItemCaseSensitive(a, "by"), ASK_BY_MAX, &by))
    error = "by must be at most 64 printable ASCII characters";
  if (error) {
    cJSON_Delete(a);
    return refusal("invalid_answer", error);
  }
  int allow = strcmp(decision->valuestring, "allow") == 0, remembered = 0;
  int session = cJSON_IsString(rem) && strcmp(rem->valuestring, "session") == 0;
  char why[300];
  uint64_t n = (uint64_t)id->valuedouble;
  int rc = ask_answer(s, n, allow, session, reason, by && by[0] ? by : "host", &remembered, why, sizeof why);
  cJSON_Delete(a);
  if (rc != 0) return refusal("no_such_ask", why);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 1);
  cJSON_AddNumberToObject(o, "id", (double)n);
  cJSON_AddStringToObject(o, "decision", allow ? "allow" : "deny");
  cJSON_AddBoolToObject(o, "remembered", remembered);
  return o;
}

static void handle_request(control_peer *p) {
  cJSON *req = cJSON_ParseWithLength(p->in.data, p->in.len);
  const cJSON *verb = req ? cJSON_GetObjectItemCaseSensitive(req, "verb") : NULL;
  const cJSON *payload = req ? cJSON_GetObjectItemCaseSensitive(req, "payload") : NULL;
  cJSON *out;
  if (!cJSON_IsString(verb)) out = refusal("bad_request", "a request is {\"verb\": ..., \"payload\": ...}");
  else if (strcmp(verb->valuestring, "egress") == 0) out = verb_egress(p->srv);
  else if (strcmp(verb->valuestring, "set-egress") == 0) out = verb_set_egress(p->srv, payload);
  else if (strcmp(verb->valuestring, "set-credentials") == 0) out = verb_set_credentials(p->srv, payload);
  else if (strcmp(verb->valuestring, "set-model-key") == 0) out = verb_set_model_key(p->srv, payload);
  else if (strcmp(verb->valuestring, "egress-asks") == 0) out = verb_egress_asks(p->srv);
  else if (strcmp(verb->valuestring, "egress-answer") == 0) out = verb_egress_answer(p->srv, payload);
  else out = refusal("bad_request", "unknown verb (egress, set-egress, set-credentials, set-model-key, egress-asks, "
                                    "egress-answer)");
  cJSON_Delete(req);
  answer(p, out);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  control_peer *p = h->data;
  (void)suggested;
  size_t room = ss_buf_room(&p->in), want = room < 65536 ? room : 65536;
  if (want == 0 || ss_buf_reserve(&p->in, want) != SS_BUF_OK) {
    *b = uv_buf_init(NULL, 0);
    return;
  }
  *b = uv_buf_init(p->in.data + p->in.len, (unsigned)want);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  control_peer *p = st->data;
  (void)b;
  if (p->answered) return;
  if (n > 0) {
    p->in.len += (size_t)n;
    p->in.data[p->in.len] = '\0';
    if (p->in.len > CONTROL_MAX_REQUEST) {
      uv_read_stop(st);
      return answer(p, refusal("too_large", "the request is larger than the control socket accepts"));
    }
    return;
  }
  if (n == UV_EOF) {
    uv_read_stop(st);
    return handle_request(p);
  }
  if (n < 0) peer_close(p); /* UV_ENOBUFS too: the request outgrew its buffer */
}

static void on_peer_deadline(uv_timer_t *t) { peer_close(t->data); }

/* Only the proxy's own uid may speak: an exec in its container runs as it. */
static int peer_is_us(uv_pipe_t *pipe) {
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (uv_fileno((uv_handle_t *)pipe, &fd) != 0) return 0;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.uid == geteuid();
}

static void on_control_connection(uv_stream_t *l, int status) {
  control_server *cs = l->data;
  if (status < 0) return;
  control_peer *p = calloc(1, sizeof *p);
  if (!p) return;
  p->srv = cs->srv;
  ss_buf_init(&p->in, CONTROL_MAX_REQUEST + 1);
  uv_pipe_init(l->loop, &p->pipe, 0);
  uv_timer_init(l->loop, &p->timer);
  p->pipe.data = p->timer.data = p;
  p->open_handles = 2;
  if (uv_accept(l, (uv_stream_t *)&p->pipe) != 0 || !peer_is_us(&p->pipe)) return peer_close(p);
  uv_timer_start(&p->timer, on_peer_deadline, CONTROL_DEADLINE_MS, 0);
  uv_read_start((uv_stream_t *)&p->pipe, on_alloc, on_read);
}

/* The socket's directory: made 0700 here, or one that exists already only when it is ours and
 * closed to everyone else (a directory someone else prepared could be watched or swapped). */
static int prepare_dir(const char *path, char *why, size_t n) {
  char dir[108];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) {
    snprintf(why, n, "SANDSTACK_CONTROL_SOCKET must be an absolute path inside a directory of its own");
    return -1;
  }
  *slash = '\0';
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, n, "cannot make %s: %s", dir, strerror(errno));
    return -1;
  }
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
    snprintf(why, n, "%s must be a directory of this user with mode 0700", dir);
    return -1;
  }
  /* a socket left by an earlier run of this proxy (the directory is ours alone) */
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
  return 0;
}

static void control_freed(uv_handle_t *h) { free(h->data); }

/* "@name": a socket in the abstract namespace (no file at all), bound here because libuv 1.44's
 * uv_pipe_bind takes only paths; libuv then listens on the bound descriptor. */
static int bind_abstract(uv_pipe_t *listener, const char *name) {
  struct sockaddr_un sa;
  socklen_t len = control_address(name, &sa);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return uv_translate_sys_error(errno);
  if (bind(fd, (struct sockaddr *)&sa, len) != 0) {
    int e = errno;
    close(fd);
    return uv_translate_sys_error(e);
  }
  int rc = uv_pipe_open(listener, fd);
  if (rc != 0) close(fd);
  return rc;
}

int control_start(proxy_server *s, const char *path, char *why, size_t n) {
  if (strlen(path) >= sizeof ((control_server *)0)->path) {
    snprintf(why, n, "SANDSTACK_CONTROL_SOCKET is longer than a unix socket path may be");
    return -1;
  }
  int abstract = path[0] == '@';
  if (!abstract && prepare_dir(path, why, n) != 0) return -1;
  control_server *cs = calloc(1, sizeof *cs);
  if (!cs) {
    snprintf(why, n, "out of memory");
    return -1;
  }
  cs->srv = s;
  snprintf(cs->path, sizeof cs->path, "%s", path);
  uv_pipe_init(s->loop, &cs->listener, 0);
  cs->listener.data = cs;
  mode_t was = umask(077); /* the socket is born 0600: no moment where another user could connect */
  int rc = abstract ? bind_abstract(&cs->listener, path) : uv_pipe_bind(&cs->listener, path);
  umask(was);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&cs->listener, 16, on_control_connection);
  if (rc != 0) {
    snprintf(why, n, "cannot listen on %s: %s", path, uv_strerror(rc));
    uv_close((uv_handle_t *)&cs->listener, control_freed);
    return -1;
  }
  if (!abstract) chmod(path, 0600);
  uv_unref((uv_handle_t *)&cs->listener);
  s->control = cs;
  return 0;
}

void control_stop(proxy_server *s) {
  control_server *cs = s->control;
  if (!cs) return;
  s->control = NULL;
  if (cs->path[0] != '@') unlink(cs->path);
  uv_close((uv_handle_t *)&cs->listener, control_freed);
}
