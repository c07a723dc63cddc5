/* Credentials on streams: the secrets a connection keeps for its scrub, the response scrub and
 * the request-body scan (see credentials.h). Pure, like credentials.c. */
#include <stdlib.h>
#include <string.h>

#include "proxy/parse/cred_table.h"

/* ---- the secrets a connection keeps ---- */

static char *dup_bytes(const char *s, size_t n) {
  char *d = s ? malloc(n + 1) : NULL;
  if (d) memcpy(d, s, n), d[n] = '\0';
  return d;
}

/* What a scrub needs of e (host, port, secret, masks, forms), copied into d. -1: out of memory. */
static int entry_copy(cred_entry *d, const cred_entry *e) {
  memset(d, 0, sizeof *d);
  d->port = e->port;
  d->legacy = e->legacy;
  d->secret_len = e->secret_len;
  d->host = dup_bytes(e->host, strlen(e->host));
  d->name = dup_bytes(e->name, strlen(e->name));
  d->secret = dup_bytes(e->secret, e->secret_len);
  d->mask = dup_bytes(e->mask, e->secret_len);
  int ok = d->host && d->name && d->secret && d->mask;
  for (int f = 0; f < CREDS_FORMS && ok; f++) {
    if (!e->form[f]) continue;
    d->form_len[f] = e->form_len[f];
    d->form[f] = dup_bytes(e->form[f], e->form_len[f]);
    d->form_mask[f] = dup_bytes(e->form_mask[f], e->form_len[f]);
    ok = d->form[f] && d->form_mask[f];
  }
  return ok ? 0 : -1;
}

static int same_secret(const cred_entry *a, const cred_entry *b) {
  return a->secret_len == b->secret_len && a->port == b->port && strcmp(a->host, b->host) == 0 &&
         memcmp(a->secret, b->secret, a->secret_len) == 0;
}

static int kept_has(const proxy_creds *kept, const cred_entry *e) {
  for (size_t j = 0; kept && j < kept->n; j++)
    if (same_secret(&kept->e[j], e)) return 1;
  return 0;
}

int creds_keep(proxy_creds **kept, const proxy_creds *t, const char *host, int port) {
  for (size_t i = 0; t && i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (!creds_for_host(e, host, port) || kept_has(*kept, e)) continue;
    if (!*kept && !(*kept = calloc(1, sizeof **kept))) return -1;
    proxy_creds *k = *kept;
    if (k->n >= CREDS_KEPT_MAX) return -1;
    cred_entry *grown = realloc(k->e, (k->n + 1) * sizeof *k->e);
    if (!grown) return -1;
    k->e = grown;
    if (entry_copy(&k->e[k->n], e) != 0) return creds_entry_free(&k->e[k->n]), -1;
    k->n++;
  }
  return 0;
}

int creds_scrubs(const proxy_creds *t, const proxy_creds *kept, const char *host, int port) {
  for (size_t i = 0; t && i < t->n; i++)
    if (creds_for_host(&t->e[i], host, port)) return 1;
  for (size_t i = 0; kept && i < kept->n; i++)
    if (creds_for_host(&kept->e[i], host, port)) return 1;
  return 0;
}

/* ---- streams ---- */

typedef struct {
  const char *find, *repl; /* repl NULL: finding it is CREDS_MISPLACED */
  size_t len;
  size_t prefix; /* a run of at least this many of its first bytes, cut short, is masked too (0: none) */
  const cred_entry *entry;
} needle;

#define NEEDLES_MAX ((CREDS_MAX + 1 + CREDS_KEPT_MAX) * (1 + CREDS_FORMS))

static size_t prefix_of(size_t len) {
  size_t half = (len + 1) / 2;
  return half < CREDS_PREFIX_MIN ? (len < CREDS_PREFIX_MIN ? len : CREDS_PREFIX_MIN) : half;
}

static size_t add_scrub(const cred_entry *e, needle *nd, size_t k) {
  nd[k++] = (needle){e->secret, e->mask, e->secret_len, prefix_of(e->secret_len), e};
  for (int f = 0; f < CREDS_FORMS; f++)
    if (e->form[f]) nd[k++] = (needle){e->form[f], e->form_mask[f], e->form_len[f], prefix_of(e->form_len[f]), e};
  return k;
}

/* The needles of a mode: the secrets of host:port in t and kept, and their forms (scrub), every
 * placeholder (scan); *longest the longest needle. */
static size_t needles_of(const proxy_creds *t, const proxy_creds *kept, const char *host, int port, creds_mode mode,
                         needle *nd, unsigned char first[256], size_t *longest) {
  size_t k = 0;
  for (size_t i = 0; t && i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (mode == CREDS_SCRUB && creds_for_host(e, host, port) && !kept_has(kept, e)) k = add_scrub(e, nd, k);
    else if (mode == CREDS_SCAN && !e->legacy) nd[k++] = (needle){e->placeholder, NULL, e->placeholder_len, 0, e};
  }
  for (size_t i = 0; mode == CREDS_SCRUB && kept && i < kept->n; i++)
    if (creds_for_host(&kept->e[i], host, port)) k = add_scrub(&kept->e[i], nd, k);
  memset(first, 0, 256);
  *longest = 0;
  for (size_t j = 0; j < k; j++) {
    first[(unsigned char)nd[j].find[0]] = 1;
    if (nd[j].len > *longest) *longest = nd[j].len;
  }
  return k;
}

static size_t common_prefix(const char *a, const char *b, size_t n) {
  size_t i = 0;
  while (i < n && a[i] == b[i]) i++;
  return i;
}

creds_status creds_stream_feed(const proxy_creds *t, const proxy_creds *kept, const char *host, int port,
                               creds_mode mode, creds_stream *st, const char *data, size_t n, int final, char **out,
                               size_t *out_len, char *what, size_t what_len) {
  needle nd[NEEDLES_MAX];
  unsigned char first[256];
  size_t longest;
  size_t k = needles_of(t, kept, host, port, mode, nd, first, &longest);
  *out = NULL;
  *out_len = 0;
  size_t m = st->len + n;
  if (m == 0) return CREDS_OK;
  char *b = malloc(m), *o = malloc(m); /* the carry and the new bytes; what passes (never longer) */
  if (!b || !o) {
    free(b);
    free(o);
    return CREDS_NOMEM;
  }
  if (st->len) memcpy(b, st->carry, st->len);
  if (n) memcpy(b + st->len, data, n);
  /* Decided here: every position with the longest needle's length ahead of it (all of them at
   * the end). The rest, whatever it holds, is the carry: a match can start in it. */
  size_t hold = final || longest == 0 ? 0 : longest - 1, stop = m > hold ? m - hold : 0;
  size_t i = 0, ol = 0;
  creds_status rc = CREDS_OK;
  while (i < stop) {
    const needle *best = NULL;
    size_t best_len = 0;
    for (size_t j = 0; first[(unsigned char)b[i]] && j < k; j++) {
      size_t have = m - i < nd[j].len ? m - i : nd[j].len;
      size_t same = common_prefix(b + i, nd[j].find, have);
      int whole = same == nd[j].len;
      if (!whole && !(nd[j].prefix && same >= nd[j].prefix && nd[j].repl)) continue;
      if (same > best_len || (same == best_len && whole)) best = &nd[j], best_len = same;
    }
    if (best && !best->repl) {
      rc = creds_misplaced(best->entry, what, what_len);
      break;
    }
    if (best) {
      memcpy(o + ol, best->repl, best_len); /* a whole needle's mask, or as much of it as was cut short */
      ol += best_len;
      i += best_len;
    } else {
      o[ol++] = b[i++];
    }
  }
  memset(b, 0, i); /* the bytes passed on may have held a secret */
  if (st->carry) memset(st->carry, 0, st->len);
  free(st->carry);
  st->carry = NULL;
  st->len = 0;
  if (rc == CREDS_OK && i < m) { /* the held tail waits for the next bytes */
    memmove(b, b + i, m - i);
    st->carry = b;
    st->len = m - i;
  } else {
    free(b);
  }
  if (rc != CREDS_OK || ol == 0) {
    free(o);
    return rc;
  }
  *out = o;
  *out_len = ol;
  return CREDS_OK;
}

void creds_stream_free(creds_stream *st) {
  if (st->carry) memset(st->carry, 0, st->len);
  free(st->carry);
  st->carry = NULL;
  st->len = 0;
}
