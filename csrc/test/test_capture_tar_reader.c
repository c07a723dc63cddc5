/* The capture's streaming tar reader (csrc/capture/tar_reader.c, pax.c) and its name check
 * (names.c): the members an archive holds, with what pax and GNU headers say applied, and each
 * damaged archive refused with its message and offset. Archives are built here (tar_build.h);
 * the fuzz target's seeds (fuzz_capture_tar, members listed by Python's tarfile) are cases. */
#include "capture/internal.h"
#include "test/tar_build.h"
#include "test/unit.h"

/* Reads a whole archive: the members (at most max) into ents, each one's data into data[i]
 * (malloc'd, its length in data_len[i]). Returns the member count, or -1 with e set. */
typedef struct {
  cap_entry ents[16];
  char *data[16];
  size_t data_len[16];
  int n;
} members;

static int read_all(const tb_archive *a, members *m, ss_error *e) {
  tb_reading src = {a->b, a->n, 0, 0};
  cap_source s = {tb_read, &src};
  cap_reader r;
  cap_reader_init(&r, &s);
  memset(m, 0, sizeof *m);
  for (;;) {
    cap_entry ent;
    int rc = cap_reader_next(&r, &ent, e);
    if (rc <= 0) return rc < 0 ? -1 : m->n;
    if (m->n == 16) return -1;
    m->ents[m->n] = ent;
    char *buf = malloc(ent.size + 1);
    size_t got = 0;
    for (ssize_t k; buf && (k = cap_reader_data(&r, buf + got, ent.size - got + 1, e)) != 0; got += (size_t)k)
      if (k < 0) {
        free(buf);
        return -1;
      }
    m->data[m->n] = buf;
    m->data_len[m->n++] = got;
  }
}

static void free_members(members *m) {
  for (int i = 0; i < 16; i++) free(m->data[i]);
}

static void reads_ustar_members(ut_run *t) {
  tb_archive a = {0};
  tb_member(&a, (tb_header){.name = "dir/", .type = '5', .size_field = "00000000144", .mode = 0755}, NULL, 0);
  tb_member(&a, (tb_header){.name = "dir/a.txt", .mode = 04755, .mtime = 1234567890}, "hello", 5);
  tb_member(&a, (tb_header){.name = "ln", .type = '2', .link = "target"}, NULL, 0);
  tb_member(&a, (tb_header){.name = "f", .prefix = "deep/path"}, "x", 1);
  tb_member(&a, (tb_header){.name = "g", .prefix = "ignored", .magic = "ustar  "}, NULL, 0); /* old GNU: no prefix */
  tb_member(&a, (tb_header){.name = "olddir/", .keep_type = 1, .magic = "\0\0\0\0\0\0\0"}, NULL, 0); /* v7 */
  tb_end(&a);
  REQUIRE(CHECK(!a.oom));
  members m;
  ss_error e;
  ss_error_init(&e);
  REQUIRE(CHECK_EQ(read_all(&a, &m, &e), 6));
  CHECK_EQ(m.ents[0].type, '5');
  CHECK_EQ(m.ents[0].size, 0); /* a directory's size field announces no data */
  CHECK_EQ(m.ents[0].mode, 0755);
  CHECK_STR(m.ents[1].name.s, "dir/a.txt");
  CHECK_EQ(m.ents[1].size, 5);
  CHECK_EQ(m.ents[1].mode, 04755); /* as the archive says: extract.c drops the set-id bits */
  CHECK_EQ(m.ents[1].mtime, 1234567890);
  CHECK_MEM(m.data[1], m.data_len[1], "hello", 5);
  CHECK_EQ(m.ents[2].type, '2');
  CHECK_STR(m.ents[2].link.s, "target");
  CHECK_STR(m.ents[3].name.s, "deep/path/f");
  CHECK_STR(m.ents[4].name.s, "g");
  CHECK_EQ(m.ents[5].type, '5'); /* a v7 directory: a plain file type and a trailing slash */
  free_members(&m);
  free(a.b);
}

static void applies_pax_and_gnu_headers(ut_run *t) {
  tb_archive a = {0};
  static const char pax[] = "31 path=long/name/from/pax.txt\n15 mtime=-5.25\n10 size=3\n16 linkpath=lnk\n";
  tb_meta(&a, 'x', pax, sizeof pax - 1);
  tb_member(&a, (tb_header){.name = "short", .size = 99}, "abc", 3); /* pax's size wins */
  tb_meta(&a, 'g', "12 comment=\n", 12); /* global: read past */
  tb_meta(&a, 'L', "gnu/long/name\0\0", 15);
  tb_meta(&a, 'K', "gnu-link\0", 9);
  tb_member(&a, (tb_header){.name = "trunc", .type = '2'}, NULL, 0);
  static const char set[] = "14 path=p.txt\n", unset[] = "8 path=\n";
  tb_meta(&a, 'x', set, sizeof set - 1);
  tb_meta(&a, 'x', unset, sizeof unset - 1); /* an empty value deletes the override */
  tb_member(&a, (tb_header){.name = "ustar-name"}, NULL, 0);
  static const char sparse[] = "22 GNU.sparse.major=1\n";
  tb_meta(&a, 'x', sparse, sizeof sparse - 1);
  tb_member(&a, (tb_header){.name = "s", .size_field = "\x80\0\0\0\0\0\0\0\0\0\0\x02"}, "zz", 2); /* base-256 */
  tb_end(&a);
  REQUIRE(CHECK(!a.oom));
  members m;
  ss_error e;
  ss_error_init(&e);
  if (!CHECK_EQ(read_all(&a, &m, &e), 4)) NOTE("%s", e.message);
  CHECK_STR(m.ents[0].name.s, "long/name/from/pax.txt");
  CHECK_EQ(m.ents[0].mtime, -5);
  CHECK_EQ(m.ents[0].size, 3);
  CHECK_STR(m.ents[0].link.s, "lnk");
  CHECK_MEM(m.data[0], m.data_len[0], "abc", 3);
  CHECK_STR(m.ents[1].name.s, "gnu/long/name");
  CHECK_STR(m.ents[1].link.s, "gnu-link");
  CHECK_STR(m.ents[2].name.s, "ustar-name");
  CHECK_EQ(m.ents[3].sparse, 1);
  CHECK_EQ(m.ents[3].size, 2);
  CHECK_MEM(m.data[3], m.data_len[3], "zz", 2);
  free_members(&m);
  free(a.b);
}

/* The archive is refused with kind engine/bad_archive, message and offset. */
static void refused(ut_run *t, tb_archive *a, const char *message, unsigned long long offset) {
  members m;
  ss_error e;
  ss_error_init(&e);
  if (CHECK(!a->oom) && CHECK_EQ(read_all(a, &m, &e), -1)) {
    CHECK_STR(e.kind, "engine");
    CHECK_STR(e.reason, "bad_archive");
    char want[300];
    snprintf(want, sizeof want, "the capture archive is malformed at byte %llu: %s", offset, message);
    CHECK_STR(e.message, want);
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(e.fields, "offset");
    CHECK(cJSON_IsNumber(at) && at->valuedouble == (double)offset);
  }
  free_members(&m);
  ss_error_clear(&e);
  free(a->b);
  *a = (tb_archive){0};
}

static void refuses_a_damaged_archive(ut_run *t) {
  tb_archive a = {0};
  tb_member(&a, (tb_header){.name = "a", .chksum_delta = 1}, "x", 1);
  tb_end(&a);
  refused(t, &a, "header checksum mismatch", 0);

  char hundred[100];
  memset(hundred, 'h', sizeof hundred);
  tb_member(&a, (tb_header){.name = "a", .size = 600}, hundred, sizeof hundred);
  a.n = 612; /* the archive stops inside the member's data */
  refused(t, &a, "the archive ends in the middle of a member", 612);

  tb_member(&a, (tb_header){.name = "a"}, "x", 1); /* no end-of-archive block */
  refused(t, &a, "the archive ends in the middle of a member", 1024);

  tb_member(&a, (tb_header){.name = "a", .size_field = "0000000012x"}, NULL, 0);
  tb_end(&a);
  refused(t, &a, "a malformed size or mode field", 0);

  tb_member(&a, (tb_header){.name = "a", .size_field = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfe"}, NULL, 0);
  tb_end(&a);
  refused(t, &a, "a malformed size or mode field", 0); /* negative base-256 */

  tb_meta(&a, 'x', "5 path=x\n", 9); /* the record's length is not 5 */
  tb_member(&a, (tb_header){.name = "a"}, NULL, 0);
  tb_end(&a);
  refused(t, &a, "a malformed pax record", 1024);

  tb_meta(&a, 'x', "28 size=9223372036854775808\n", 28);
  tb_member(&a, (tb_header){.name = "a"}, NULL, 0);
  tb_end(&a);
  refused(t, &a, "a member of 9223372036854775808 bytes", 1024);

  tb_member(&a, (tb_header){.name = "a", .type = 'x', .size = 1048577}, NULL, 0); /* one over CAP_META_MAX */
  tb_end(&a);
  refused(t, &a, "a pax or long-name header of 1048577 bytes (at most 1048576)", 512);

  for (int i = 0; i < CAP_META_CHAIN; i++) tb_meta(&a, 'g', NULL, 0);
  tb_member(&a, (tb_header){.name = "a"}, NULL, 0);
  tb_end(&a);
  refused(t, &a, "more than 15 pax or long-name headers in a row", 512 * (CAP_META_CHAIN - 1));

  tb_meta(&a, 'L', "name\0", 5);
  tb_end(&a);
  refused(t, &a, "the archive ends after a pax or long-name header", 1024);
}

/* A chain of CAP_META_CHAIN - 1 metadata headers is still read. */
static void reads_the_longest_chain(ut_run *t) {
  tb_archive a = {0};
  for (int i = 0; i < CAP_META_CHAIN - 1; i++) tb_meta(&a, 'g', NULL, 0);
  tb_member(&a, (tb_header){.name = "a"}, NULL, 0);
  tb_end(&a);
  members m;
  ss_error e;
  ss_error_init(&e);
  CHECK_EQ(read_all(&a, &m, &e), 1);
  free_members(&m);
  free(a.b);
}

static void judges_member_names(ut_run *t) {
  static const struct {
    const char *name, *out, *reason;
    int root;
  } cases[] = {
      {"a/./b//c/", "a/b/c", NULL, 0}, {"./", "", NULL, 1},         {".", "", NULL, 1},
      {"/etc/passwd", NULL, "absolute", 0}, {"a/../b", NULL, "dotdot", 0}, {"..", NULL, "dotdot", 0},
      {"", NULL, "empty", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cap_name n;
    cap_name_set(&n, cases[i].name, strlen(cases[i].name));
    char out[FP_PATH_MAX];
    size_t len = 0;
    int root = 0;
    const char *why = cap_name_check(&n, out, &len, &root);
    int ok = CHECK_STR(why, cases[i].reason);
    if (!why) ok &= CHECK_STR(out, cases[i].out) & CHECK_EQ(len, strlen(cases[i].out)) & CHECK_EQ(root, cases[i].root);
    if (!ok) NOTE("name '%s'", cases[i].name);
  }
  cap_name n;
  char out[FP_PATH_MAX], *big = malloc(FP_PATH_MAX + 1);
  REQUIRE(CHECK(big != NULL));
  size_t len;
  int root;
  cap_name_set(&n, "a\0b", 3);
  CHECK_STR(cap_name_check(&n, out, &len, &root), "nul");
  memset(big, 'c', FP_NAME_MAX + 1);
  cap_name_set(&n, big, FP_NAME_MAX);
  CHECK(cap_name_check(&n, out, &len, &root) == NULL);
  cap_name_set(&n, big, FP_NAME_MAX + 1);
  CHECK_STR(cap_name_check(&n, out, &len, &root), "name_too_long");
  memset(big, '/', FP_PATH_MAX); /* slashes only: short once cleaned, too long as spelled */
  cap_name_set(&n, big, FP_PATH_MAX);
  CHECK_EQ(n.too_long, 1);
  CHECK_STR(cap_name_check(&n, out, &len, &root), "too_long");
  free(big);
}

/* The seeds (byte 0 the target's control byte; the archives are valid as they are). Names are
 * as the archive spells them (Python's tarfile drops a directory's trailing slash). */
typedef struct {
  const char *name, *link, *data;
  char type;
  size_t size;
} member_want;

static void check_members(ut_run *t, const tb_archive *a, const member_want *want, int n) {
  members m;
  ss_error e;
  ss_error_init(&e);
  if (!CHECK_EQ(read_all(a, &m, &e), n)) NOTE("%s", e.message);
  for (int i = 0; i < n && i < m.n; i++) {
    int ok = CHECK_STR(m.ents[i].name.s, want[i].name) & CHECK_EQ(m.ents[i].type, want[i].type) &
             CHECK_EQ(m.ents[i].size, want[i].size) & CHECK_STR(m.ents[i].link.s, want[i].link ? want[i].link : "");
    if (want[i].data) ok &= CHECK_MEM(m.data[i], m.data_len[i], want[i].data, want[i].size);
    if (!ok) NOTE("member %d", i);
  }
  free_members(&m);
  ss_error_clear(&e);
}

static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  REQUIRE(CHECK(len > 1));
  tb_archive a = {(unsigned char *)data + 1, len - 1, len - 1, 0};
  char l150[160], k150[160], q200[210], prefixed[190], x700[701];
  memcpy(l150, "w/", 2), memset(l150 + 2, 'L', 150), memcpy(l150 + 152, "/x", 3);
  memset(k150, 'K', 150), k150[150] = '\0';
  memcpy(q200, "p/", 2), memset(q200 + 2, 'q', 200), q200[202] = '\0';
  memcpy(prefixed, "pre/", 4), memset(prefixed + 4, 'f', 90), prefixed[94] = '/';
  memset(prefixed + 95, 'g', 90), prefixed[185] = '\0';
  memset(x700, 'x', 700), x700[700] = '\0';
  if (strncmp(name, "gnu_types-", 10) == 0) {
    const member_want want[] = {{"w/", NULL, NULL, '5', 0},        {"w/f.txt", NULL, "hello\n", '0', 6},
                                {"w/sym", "/etc/passwd", NULL, '2', 0}, {"w/hard", "w/f.txt", NULL, '1', 0},
                                {"w/null", NULL, NULL, '3', 0},   {"w/fifo", NULL, NULL, '6', 0},
                                {l150, NULL, "long", '0', 4},     {"w/longlink", k150, NULL, '2', 0}};
    check_members(t, &a, want, 8);
  } else if (strncmp(name, "pax_names-", 10) == 0) {
    const member_want want[] = {{q200, NULL, "pax", '0', 3},  {"../up", NULL, "u", '0', 1},   {"/abs", NULL, "a", '0', 1},
                                {"a/b/../../../c", NULL, "c", '0', 1}, {"ok/./x//y", NULL, "y", '0', 1},
                                {"dup", NULL, "1", '0', 1},    {"dup", NULL, "2", '0', 1},     {"dup/under", NULL, "3", '0', 1}};
    check_members(t, &a, want, 8);
  } else if (strncmp(name, "ustar_prefix-", 13) == 0) {
    const member_want want[] = {{prefixed, NULL, "prefixed", '0', 8}, {"d/", NULL, NULL, '5', 0}};
    check_members(t, &a, want, 2);
  } else if (strncmp(name, "small_file-", 11) == 0) {
    const member_want want[] = {{"a", NULL, x700, '0', 700}};
    check_members(t, &a, want, 1);
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "capture_tar_reader");
  UT_RUN(&t, reads_ustar_members);
  UT_RUN(&t, applies_pax_and_gnu_headers);
  UT_RUN(&t, refuses_a_damaged_archive);
  UT_RUN(&t, reads_the_longest_chain);
  UT_RUN(&t, judges_member_names);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_capture_tar", seed, NULL);
  return ut_end(&t);
}
