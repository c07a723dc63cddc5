/* libFuzzer target for the proxy's credentials (csrc/proxy/parse/cred_table.c). The first input byte
 * picks what is fuzzed:
 *  - even: the rest is SANDSTACK_CREDENTIALS. A table is accepted only with every entry whole
 *    (placeholder letters and digits, as long as its secret, one placement, a template with one
 *    %s); a refusal says why. The same bytes as a live table (creds_parse_live): a model key
 *    taken out is whole, and no entry of the table keeps its name.
 *  - odd: a fixed table (header, query, basic and path credentials for one host, a header one for
 *    another, the credential route's own entry) and the rest is a request head then stream bytes.
 *    The head rewrite: with no placeholder in the head it changes nothing; a refusal leaves the
 *    head as it was; an accepted rewrite leaves no placeholder of the host's credentials where it
 *    was placed (their secrets are there instead). The streams: fed in pieces (the second byte
 *    picks their size) they give exactly what one whole feed gives, so a needle split across reads
 *    is handled as one that is not; a scrub keeps the length. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/parse/cred_table.h"

#define HOST "api.example.test"
#define PORT 8443

static const char TABLE[] =
    "[{\"name\":\"GH\",\"host\":\"api.example.test\",\"port\":8443,\"secret\":\"ghp_SECRETsecret0001\","
    "\"placeholder\":\"PHghAAAAAAAAAAAAAAAA\",\"header\":\"Authorization\",\"format\":\"Bearer %s\"},"
    "{\"name\":\"Q\",\"host\":\"api.example.test\",\"port\":8443,\"secret\":\"q/s+e&c=r%t?00000\","
    "\"placeholder\":\"PHqBBBBBBBBBBBBBB\",\"query\":\"key\"},"
    "{\"name\":\"B\",\"host\":\"api.example.test\",\"port\":8443,\"secret\":\"basic:secret-0000\","
    "\"placeholder\":\"PHbCCCCCCCCCCCCCC\",\"basic\":\"bot\"},"
    "{\"name\":\"P\",\"host\":\"api.example.test\",\"port\":8443,\"secret\":\"123456:pathsecret\","
    "\"placeholder\":\"PHpDDDDDDDDDDDDDD\",\"path\":\"/bot%s/\"},"
    "{\"name\":\"OTHER\",\"host\":\"other.test\",\"secret\":\"other-secret-00000\","
    "\"placeholder\":\"PHoEEEEEEEEEEEEEEE\",\"header\":\"X-Key\"}]";

static int is_alnum(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }

static void check_table(const proxy_creds *t) {
  for (size_t i = 0; i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (strlen(e->mask) != e->secret_len) abort();
    if (e->legacy) continue; /* the credential route's own: any key, the session token */
    if (e->secret_len != e->placeholder_len || e->secret_len < CREDS_SECRET_MIN || e->secret_len > CREDS_SECRET_MAX) abort();
    if (strlen(e->secret) != e->secret_len || strcmp(e->mask, e->placeholder) != 0) abort();
    for (size_t k = 0; k < e->placeholder_len; k++)
      if (!is_alnum((unsigned char)e->placeholder[k])) abort();
    if ((e->place == CRED_HEADER || e->place == CRED_PATH) && (!e->format || !strstr(e->format, "%s"))) abort();
    if (e->place != CRED_PATH && !e->field) abort();
  }
}

/* Feeds data whole, then in pieces of `step`: the outputs and verdicts must agree. */
static void check_stream(const proxy_creds *t, creds_mode mode, const char *data, size_t n, size_t step) {
  creds_stream whole = {0}, parts = {0};
  char *a = NULL, what[80];
  size_t al = 0;
  creds_status sa = creds_stream_feed(t, NULL, HOST, PORT, mode, &whole, data, n, 1, &a, &al, what, sizeof what);
  if (whole.len != 0 && sa == CREDS_OK) abort(); /* final lets everything go */
  char *b = malloc(n + 1);
  size_t bl = 0;
  creds_status sb = CREDS_OK;
  for (size_t off = 0; off <= n && sb == CREDS_OK; off += step) {
    size_t k = n - off < step ? n - off : step;
    char *o = NULL;
    size_t ol = 0;
    sb = creds_stream_feed(t, NULL, HOST, PORT, mode, &parts, data + off, k, off + k >= n, &o, &ol, what, sizeof what);
    if (parts.len >= CREDS_SECRET_MAX) abort(); /* the carry is shorter than any needle */
    if (ol) memcpy(b + bl, o, ol);
    bl += ol;
    free(o);
    if (off + k >= n) break;
  }
  if (sa != sb) abort();
  if (sa == CREDS_OK && (al != bl || (al && memcmp(a, b, al) != 0))) abort();
  if (sa == CREDS_OK && al != n) abort(); /* same length: framing stays valid */
  if (mode == CREDS_SCAN && sa == CREDS_OK && (al != n || (n && memcmp(a, data, n) != 0))) abort();
  free(a);
  free(b);
  creds_stream_free(&whole);
  creds_stream_free(&parts);
}

static void fuzz_head(const proxy_creds *t, const char *data, size_t n) {
  const char *end = memmem(data, n, "\r\n\r\n", 4);
  size_t hl = end ? (size_t)(end - data) + 4 : n;
  char *head = malloc(hl + 1);
  memcpy(head, data, hl);
  size_t len = hl;
  char what[80] = "";
  creds_status st = creds_rewrite_head(t, HOST, PORT, data, hl, &head, &len, what, sizeof what);
  int any = 0;
  for (size_t i = 0; i < t->n; i++)
    if (!t->e[i].legacy && memmem(data, hl, t->e[i].placeholder, t->e[i].placeholder_len)) any = 1;
  if (st == CREDS_MISPLACED && !*what) abort();
  if (st != CREDS_OK) { /* refused: the head is as it was */
    if (len != hl || memcmp(head, data, hl) != 0) abort();
  }
  free(head);
  char why[80];
  if (creds_check_head(t, data, hl, why, sizeof why) == CREDS_OK && any) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size) {
  if (size < 2) return 0;
  const char *data = (const char *)in + 2;
  size_t n = size - 2;
  char why[400] = "";
  if (!(in[0] & 1)) {
    proxy_creds *t = creds_parse(data, n, why, sizeof why);
    if (!t && !*why) abort();
    if (t) check_table(t);
    creds_free(t);
    /* the live table: a model key taken out is whole, and nothing else is named for it */
    char *key = NULL;
    why[0] = '\0';
    t = creds_parse_live(data, n, &key, why, sizeof why);
    if (!t && (!*why || key)) abort();
    if (key && (strlen(key) < CREDS_SECRET_MIN || strlen(key) > CREDS_SECRET_MAX)) abort();
    for (size_t i = 0; t && i < t->n; i++)
      if (strcmp(t->e[i].name, "ANTHROPIC_API_KEY") == 0) abort();
    if (t) check_table(t);
    creds_free(t);
    free(key);
    return 0;
  }
  proxy_creds *t = creds_parse(TABLE, sizeof TABLE - 1, why, sizeof why);
  if (!t || creds_add_legacy(t, HOST, PORT, "sk-legacy-model-key", "tok-session-token") != 0) abort();
  check_table(t);
  fuzz_head(t, data, n);
  size_t step = (size_t)(in[1] % 23) + 1;
  check_stream(t, CREDS_SCRUB, data, n, step);
  check_stream(t, CREDS_SCAN, data, n, step);
  creds_free(t);
  return 0;
}
