#ifndef SANDSTACK_PROXY_CREDENTIALS_H
#define SANDSTACK_PROXY_CREDENTIALS_H
/* Credentials for any host (docs/proxy.md "Credentials for any host"). The sandbox
 * holds a placeholder per credential; only the proxy holds the secret. On an inspected request
 * it has admitted for the credential's host and port, the proxy puts the secret where the
 * credential names (a header, a query parameter, Basic auth, a path prefix), in place of the
 * placeholder the client wrote there. A placeholder anywhere else is misplaced and refused. A
 * response carrying a secret back has it replaced by a mask of the same length (the
 * placeholder), so its framing stays valid.
 *
 * Pure: no I/O, no libuv, so csrc/fuzz/fuzz_proxy_credentials.c links exactly this file. The
 * table is replaced whole while the proxy runs (srv->creds, swapped live), so callers never
 * keep a pointer into it from one callback to the next; a stream's state (creds_stream) holds
 * bytes only. Nothing here ever writes a secret into an error text. */
#include <stddef.h>

typedef enum { CRED_HEADER, CRED_QUERY, CRED_BASIC, CRED_PATH } cred_place;

#define CREDS_FORMS 4

typedef struct cred_entry {
  char *name;        /* the sandbox's variable, e.g. GH_TOKEN (error texts and audit name it) */
  char *host;        /* canonical (ss_host_normalize) */
  int port;
  cred_place place;
  char *field;       /* header name, query parameter or Basic user; NULL for a path */
  char *format;      /* header value ("Bearer %s") or path prefix template ("/bot%s/"); else NULL */
  char *secret, *placeholder;
  char *mask;        /* what a response gets in place of the secret: same length (the placeholder) */
  /* Other forms of the secret a response is scrubbed of too, each masked by '*' of its length;
   * NULL when a form is the secret itself or another form: [0] as the placement sends it
   * (percent-encoded in a query or path, base64 of user:secret for Basic), [1] percent-encoded
   * (all but RFC 3986 unreserved), [2] JSON-escaped ('"', '\\' and '/' with a backslash), [3]
   * HTML-escaped (& < > " ' as entities). */
  char *form[CREDS_FORMS], *form_mask[CREDS_FORMS];
  size_t form_len[CREDS_FORMS];
  size_t secret_len, placeholder_len;
  int legacy;        /* the model key of the credential route: placed by credential.c only */
} cred_entry;

typedef struct proxy_creds {
  cred_entry *e;
  size_t n;
} proxy_creds;

#define CREDS_MAX 64
#define CREDS_SECRET_MIN 16
#define CREDS_SECRET_MAX 4096
/* A scrubbed response also masks a run of at least this share of a secret's first bytes (or of
 * one of its forms) that the response cuts short: half its length, and never fewer than
 * CREDS_PREFIX_MIN bytes. A truncated reflection gives away at most half of a secret. */
#define CREDS_PREFIX_MIN 8
/* The secrets a connection keeps for its own scrub (creds_keep), retired ones included. */
#define CREDS_KEPT_MAX (2 * CREDS_MAX)

/* The SANDSTACK_CREDENTIALS array (contract: name, host, port, secret, placeholder and one of
 * header (+ format) / query / basic / path). NULL with a reason in why (never a secret).
 * An empty json (len 0) is an empty table. */
proxy_creds *creds_parse(const char *json, size_t len, char *why, size_t why_len);
/* Appends the credential route's own entry (ANTHROPIC_API_KEY toward the upstream, its
 * placeholder the session token). Its secret may be any length: its mask is the placeholder
 * when the lengths agree, else '*' repeated. 0, or -1 when out of memory. */
int creds_add_legacy(proxy_creds *t, const char *host, int port, const char *secret, const char *placeholder);
void creds_free(proxy_creds *t);
/* The table a live set-credentials sends (docs/proxy.md "Policy changed live"): the
 * SANDSTACK_CREDENTIALS array, in which one entry may be {"name":"ANTHROPIC_API_KEY","secret":KEY}
 * and nothing more: the credential route's model key, replaced live. Any other entry of
 * that name, a second one, or a key that is not CREDS_SECRET_MIN..MAX characters of visible
 * ASCII is refused. The rest is creds_parse's. On success *model_key is a copy of the key, or NULL
 * when the table names none; the caller zeroes and frees it. NULL with a reason in why (never
 * the key) on any refusal. */
proxy_creds *creds_parse_live(const char *json, size_t len, char **model_key, char *why, size_t why_len);
/* The credential route's model key in force (its own entry's secret), or NULL with none. */
const char *creds_model_key(const proxy_creds *t);
/* Replaces the model key in t's own entry, in place (the live set-model-key; every reader looks
 * the table up afresh on each call). 0; or -1 with why when key is not CREDS_SECRET_MIN..MAX
 * characters of visible ASCII, t has no such entry, or memory runs out: t is then unchanged. */
int creds_set_model_key(proxy_creds *t, const char *key, char *why, size_t why_len);

/* Shared by credentials.c and credentials_stream.c: an entry's memory (its secrets wiped),
 * whether it is for host:port, and (below) CREDS_MISPLACED naming it in what. */
void creds_entry_free(cred_entry *e);
int creds_for_host(const cred_entry *e, const char *host, int port);

/* 1 when a (non-legacy) credential names host:port: such a host is always inspected. */
int creds_has_host(const proxy_creds *t, const char *host, int port);
/* 1 when any (non-legacy) credential exists: the proxy then needs its inspection CA. */
int creds_any_host(const proxy_creds *t);

/* CREDS_UNREADABLE: a Basic value the proxy cannot decode for certain (not canonical base64, or
 * over BASIC_MAX decoded bytes), refused while any credential exists, since an origin might
 * decode it more leniently and find a placeholder there. */
typedef enum { CREDS_OK = 0, CREDS_MISPLACED, CREDS_NOMEM, CREDS_UNREADABLE } creds_status;
creds_status creds_misplaced(const cred_entry *e, char *what, size_t what_len);

/* An inspected request toward host:port. orig: the head exactly as the client sent it; *head:
 * the head the proxy will send on (request line, Host, kept fields; malloc'd). Every placeholder
 * of this host's credentials in its named place is replaced by the secret (*head is replaced by
 * a new allocation). CREDS_MISPLACED when the client's head holds any placeholder that was not
 * so replaced (another header, the request line, another host's credential, inside a Basic
 * value, or written twice: two copies of the header or of the query parameter), with the credential's name copied into what; *head is then unchanged. */
creds_status creds_rewrite_head(const proxy_creds *t, const char *host, int port, const char *orig, size_t orig_len,
                                char **head, size_t *head_len, char *what, size_t what_len);
/* A head that gets no credential (plain HTTP, the credential route): CREDS_MISPLACED when it
 * holds any placeholder (raw, or inside a Basic value), naming it in what. */
creds_status creds_check_head(const proxy_creds *t, const char *head, size_t len, char *what, size_t what_len);

/* The secrets a connection's scrub looks for besides those of the table in force: every entry
 * for host:port of t (the credential route's own included) is copied into *kept unless it is
 * there already, so a secret retired by a live replacement is still scrubbed from the answers
 * of a connection that may have placed it. creds_free wipes the copies (at the connection's
 * end). 0, or -1 when out of memory or past CREDS_KEPT_MAX entries. */
int creds_keep(proxy_creds **kept, const proxy_creds *t, const char *host, int port);
/* 1 when a response from host:port would be scrubbed (t or kept has a secret for it). */
int creds_scrubs(const proxy_creds *t, const proxy_creds *kept, const char *host, int port);

/* Streams scanned across reads. The carry always holds the last (longest needle - 1) bytes
 * fed, whatever they are, so a needle split over two reads is still seen, and when bytes go on
 * says nothing about what they hold (no timing oracle on a prefix of a secret). */
typedef struct creds_stream {
  char *carry;
  size_t len;
} creds_stream;

typedef enum {
  CREDS_SCRUB, /* response: every secret of host:port's credentials (in t or kept), each of its
                  forms and each prefix of CREDS_PREFIX_MIN or half its length, becomes a mask */
  CREDS_SCAN,  /* request body: any placeholder at all is CREDS_MISPLACED */
} creds_mode;

/* Feeds n bytes. *out (malloc'd, NULL when *out_len is 0) is what may be passed on now; with
 * final, the carry is let go too (the stream ended). */
creds_status creds_stream_feed(const proxy_creds *t, const proxy_creds *kept, const char *host, int port,
                               creds_mode mode, creds_stream *st,
                               const char *data, size_t n, int final, char **out, size_t *out_len, char *what,
                               size_t what_len);
void creds_stream_free(creds_stream *st);

#endif
