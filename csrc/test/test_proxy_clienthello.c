/* The ClientHello reader (csrc/proxy/parse/clienthello.c): the server name a hello carries,
 * across records and in pieces, and every hello it cannot read for certain refused as
 * CH_MALFORMED. Hellos are built here field by field; the fuzz target's seeds
 * (fuzz_proxy_clienthello, captured from real clients) are cases too. */
#include <stdint.h>
#include <stdlib.h>

#include "proxy/parse/clienthello.h"
#include "test/unit.h"

typedef struct {
  uint8_t b[CH_MAX_HELLO + 1024];
  size_t n;
} wire;

static void put(wire *w, const void *p, size_t n) {
  memcpy(w->b + w->n, p, n);
  w->n += n;
}
static void put8(wire *w, unsigned v) { w->b[w->n++] = (uint8_t)v; }
static void put16(wire *w, unsigned v) { put8(w, v >> 8), put8(w, v & 0xff); }
static void put24(wire *w, size_t v) { put8(w, (unsigned)(v >> 16)), put16(w, (unsigned)(v & 0xffff)); }

/* A server_name extension with the host_name entries names[0..n) (type 0x0000). */
static void sni_ext(wire *w, const char *const *names, size_t n) {
  size_t list = 0;
  for (size_t i = 0; i < n; i++) list += 3 + strlen(names[i]);
  put16(w, 0x0000);
  put16(w, (unsigned)(list + 2));
  put16(w, (unsigned)list);
  for (size_t i = 0; i < n; i++) {
    put8(w, 0);
    put16(w, (unsigned)strlen(names[i]));
    put(w, names[i], strlen(names[i]));
  }
}

static void other_ext(wire *w, unsigned type) {
  put16(w, type);
  put16(w, 4);
  put(w, "\x00\x02\xab\xcd", 4);
}

/* The handshake message: a ClientHello (type 1) around the extensions exts (NULL: none). */
static void hello_message(wire *out, const wire *exts, unsigned type) {
  wire body = {.n = 0};
  put16(&body, 0x0303);
  for (int i = 0; i < 32; i++) put8(&body, (unsigned)i); /* random */
  put8(&body, 0);                                        /* no session id */
  put16(&body, 2);
  put16(&body, 0x1301); /* one cipher suite */
  put8(&body, 1);
  put8(&body, 0); /* null compression */
  if (exts) {
    put16(&body, (unsigned)exts->n);
    put(&body, exts->b, exts->n);
  }
  put8(out, type);
  put24(out, body.n);
  put(out, body.b, body.n);
}

/* The message in handshake records of at most `per` bytes each. */
static void records(wire *out, const wire *msg, size_t per) {
  for (size_t at = 0; at < msg->n; at += per) {
    size_t k = msg->n - at < per ? msg->n - at : per;
    put8(out, 0x16);
    put16(out, 0x0301);
    put16(out, (unsigned)k);
    put(out, msg->b + at, k);
  }
}

/* A whole hello in records of `per` bytes, with the extensions exts (NULL: none). */
static ch_status parse_hello(const wire *exts, size_t per, char *sni) {
  wire msg = {.n = 0}, rec = {.n = 0};
  uint8_t scratch[CH_MAX_HELLO];
  hello_message(&msg, exts, 1);
  records(&rec, &msg, per);
  return ch_parse(rec.b, rec.n, scratch, sni);
}

static void reads_the_server_name(ut_run *t) {
  char sni[CH_MAX_NAME + 1];
  wire e = {.n = 0};
  other_ext(&e, 0x002b);
  sni_ext(&e, (const char *const[]){"Api.Example-1.TEST"}, 1);
  other_ext(&e, 0x000a);
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_SNI);
  CHECK_STR(sni, "api.example-1.test"); /* lowercased */
  /* the same hello in records of 7 bytes: reassembled */
  CHECK_EQ(parse_hello(&e, 7, sni), CH_SNI);
  CHECK_STR(sni, "api.example-1.test");
  /* a name of CH_MAX_NAME bytes is read whole */
  char longest[CH_MAX_NAME + 2];
  memset(longest, 'a', CH_MAX_NAME);
  longest[CH_MAX_NAME] = '\0';
  e.n = 0;
  sni_ext(&e, (const char *const[]){longest}, 1);
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_SNI);
  CHECK_STR(sni, longest);
}

static void tells_hellos_without_a_name(ut_run *t) {
  char sni[CH_MAX_NAME + 1];
  CHECK_EQ(parse_hello(NULL, 16384, sni), CH_NO_SNI);
  wire e = {.n = 0};
  other_ext(&e, 0x002b);
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_NO_SNI);
  sni_ext(&e, (const char *const[]){"outer.test"}, 1);
  other_ext(&e, 0xfe0d); /* ECH: the name read is only the outer one */
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_ECH);
  e.n = 0;
  other_ext(&e, 0xffce);
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_ESNI);
}

/* A hello naming a.test, then the bytes after (n of them), in records of `per` bytes. */
static void hello_then(wire *rec, const char *after, size_t n, size_t per) {
  wire msg = {.n = 0}, e = {.n = 0};
  sni_ext(&e, (const char *const[]){"a.test"}, 1);
  hello_message(&msg, &e, 1);
  put(&msg, after, n);
  records(rec, &msg, per);
}

/* Every strict prefix of a hello asks for more; the whole decides. */
static void waits_for_the_whole_hello(ut_run *t) {
  wire rec = {.n = 0};
  uint8_t scratch[CH_MAX_HELLO];
  char sni[CH_MAX_NAME + 1];
  hello_then(&rec, "", 0, 40);
  size_t undecided = 0;
  for (size_t k = 0; k < rec.n; k++) undecided += ch_parse(rec.b, k, scratch, sni) == CH_NEED_MORE;
  CHECK_EQ(undecided, rec.n);
  CHECK_EQ(ch_parse(rec.b, rec.n, scratch, sni), CH_SNI);
}

static void refuses_what_it_cannot_read_for_certain(ut_run *t) {
  char sni[CH_MAX_NAME + 1];
  uint8_t scratch[CH_MAX_HELLO];
  static const struct {
    const char *in;
    size_t n;
    ch_status want;
  } raw[] = {
      {"GET / HTTP/1.1\r\n", 16, CH_NOT_TLS},
      {"\x15\x03\x03\x00\x02\x01\x00", 7, CH_MALFORMED}, /* an alert before the hello */
      {"\x14\x03\x03\x00\x01\x01", 6, CH_MALFORMED},     /* change_cipher_spec first */
      {"\x16\x02\x00\x00\x05", 5, CH_MALFORMED},         /* not TLS 1.x's record version */
      {"\x16\x03\x01\x00\x00", 5, CH_MALFORMED},         /* an empty record */
      {"\x16\x03\x01\x40\x01", 5, CH_MALFORMED},         /* a record over 16384 bytes */
      {"\x16\x03\x01\x00\x04\x02\x00\x00\x30", 9, CH_MALFORMED}, /* a ServerHello */
      {"\x16\x03\x01\x00\x04\x01\x00\x80\x00", 9, CH_MALFORMED}, /* a hello over CH_MAX_HELLO */
      {"\x16\x03\x01\x00\x04\x01\x00\x00\x10", 9, CH_MALFORMED}, /* shorter than any hello */
  };
  for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++)
    if (!CHECK_EQ(ch_parse((const uint8_t *)raw[i].in, raw[i].n, scratch, sni), raw[i].want))
      NOTE("case %zu", i);

  static const char *const bad_names[] = {"a b.test", "a/b", "caf\xc3\xa9.test", ""};
  wire e;
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    e.n = 0;
    sni_ext(&e, (const char *const[]){bad_names[i]}, 1);
    if (!CHECK_EQ(parse_hello(&e, 16384, sni), CH_MALFORMED)) NOTE("name %zu", i);
  }
  char too_long[CH_MAX_NAME + 2];
  memset(too_long, 'a', CH_MAX_NAME + 1);
  too_long[CH_MAX_NAME + 1] = '\0';
  e.n = 0;
  sni_ext(&e, (const char *const[]){too_long}, 1);
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_MALFORMED);
  e.n = 0;
  sni_ext(&e, (const char *const[]){"a.test", "b.test"}, 2); /* two host names */
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_MALFORMED);
  e.n = 0;
  sni_ext(&e, (const char *const[]){"a.test"}, 1);
  sni_ext(&e, (const char *const[]){"a.test"}, 1); /* the extension twice */
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_MALFORMED);
  e.n = 0;
  other_ext(&e, 0xfe0d);
  other_ext(&e, 0xfe0d);
  CHECK_EQ(parse_hello(&e, 16384, sni), CH_MALFORMED);
}

/* A record that holds the hello and more (a second message coalesced) is refused. */
static void refuses_bytes_after_the_hello(ut_run *t) {
  wire rec = {.n = 0};
  uint8_t scratch[CH_MAX_HELLO];
  char sni[CH_MAX_NAME + 1];
  hello_then(&rec, "\x01\x02", 2, 16384);
  CHECK_EQ(ch_parse(rec.b, rec.n, scratch, sni), CH_MALFORMED);
}

static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  uint8_t scratch[CH_MAX_HELLO];
  char sni[CH_MAX_NAME + 1] = "";
  static const struct {
    const char *seed;
    ch_status want;
    const char *sni;
  } expect[] = {
      {"seed-alert-first", CH_MALFORMED, NULL}, {"seed-ccs-first", CH_MALFORMED, NULL},
      {"seed-ech", CH_ECH, NULL},               {"seed-esni", CH_ESNI, NULL},
      {"seed-nosni", CH_NO_SNI, NULL},          {"seed-plain", CH_NOT_TLS, NULL},
      {"seed-sni", CH_SNI, "allowed.test"},
  };
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    if (strcmp(name, expect[i].seed) != 0) continue;
    CHECK_EQ(ch_parse(data, len, scratch, sni), expect[i].want);
    if (expect[i].sni) CHECK_STR(sni, expect[i].sni);
    return;
  }
  FAIL("a seed this test has no expectation for: add one");
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "proxy_clienthello");
  UT_RUN(&t, reads_the_server_name);
  UT_RUN(&t, tells_hellos_without_a_name);
  UT_RUN(&t, waits_for_the_whole_hello);
  UT_RUN(&t, refuses_what_it_cannot_read_for_certain);
  UT_RUN(&t, refuses_bytes_after_the_hello);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_proxy_clienthello", seed, NULL);
  return ut_end(&t);
}
