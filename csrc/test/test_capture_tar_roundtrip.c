/* The archive writer (csrc/capture/tar_writer.c) against the capture's reader: a header written
 * for any name, size, mode and time reads back as exactly that member, whichever spelling the
 * name's length chose (ustar up to 100 bytes, a pax path record beyond), with its data intact
 * and then the archive's end. The fuzz target's seeds (fuzz_tar_roundtrip) are cases. */
#include <stdint.h>
#include <stdlib.h>

#include "capture/internal.h"
#include "test/tar_build.h"
#include "test/unit.h"

/* Writes one member and reads it back; returns the header's length (0: not written). */
static size_t round_trip(ut_run *t, const char *name, size_t nlen, size_t size, unsigned mode, long long mtime) {
  size_t cap = CAP_TAR_HEADER_MAX(nlen);
  tb_archive a = {.b = calloc(1, cap + size + 512 + 1024), .n = 0};
  if (!CHECK(a.b != NULL)) return 0;
  size_t h = cap_tar_header(a.b, cap, name, nlen, size, mode, mtime);
  if (!CHECK(h > 0 && h % 512 == 0)) {
    free(a.b);
    return 0;
  }
  for (size_t i = 0; i < size; i++) a.b[h + i] = (unsigned char)(i * 31 + 7);
  a.n = h + (size + 511) / 512 * 512 + 1024; /* data, padding, the end (calloc's zeros) */
  tb_reading src = {a.b, a.n, 0, 0};
  cap_source s = {tb_read, &src};
  cap_reader r;
  cap_reader_init(&r, &s);
  cap_entry ent;
  ss_error e;
  ss_error_init(&e);
  int ok = CHECK_EQ(cap_reader_next(&r, &ent, &e), 1);
  if (ok) {
    ok &= CHECK_EQ(ent.type, '0') & CHECK_EQ(ent.size, size) & CHECK_EQ(ent.mode, mode & 07777) &
          CHECK_EQ(ent.mtime, mtime > 0 ? mtime : 0) & CHECK_MEM(ent.name.s, ent.name.len, name, nlen);
    unsigned char chunk[4096];
    size_t got = 0, wrong = 0;
    for (ssize_t k; (k = cap_reader_data(&r, chunk, sizeof chunk, &e)) > 0; got += (size_t)k)
      for (ssize_t i = 0; i < k; i++) wrong += chunk[i] != (unsigned char)((got + (size_t)i) * 31 + 7);
    ok &= CHECK_EQ(got, size) & CHECK_EQ(wrong, 0) & CHECK_EQ(cap_reader_next(&r, &ent, &e), 0);
  } else {
    NOTE("%s", e.message);
  }
  if (!ok) NOTE("a name of %zu bytes, %zu bytes of data", nlen, size);
  ss_error_clear(&e);
  free(a.b);
  return h;
}

static void reads_back_every_shape(ut_run *t) {
  char *name = malloc(FP_PATH_MAX);
  REQUIRE(CHECK(name != NULL));
  for (size_t i = 0; i < FP_PATH_MAX; i++) name[i] = i % 9 == 8 ? '/' : (char)('a' + i % 26);
  static const size_t lengths[] = {1, 99, 100, 101, 511, 989, 990, 991, 1000, FP_PATH_MAX - 1};
  static const size_t sizes[] = {0, 1, 511, 512, 513, 70000};
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) round_trip(t, name, lengths[i], sizes[k], 0644, 1700000000);
  /* the ustar spelling up to 100 bytes, a pax header and its data before it beyond */
  CHECK_EQ(round_trip(t, name, 100, 0, 0644, 0), 512);
  CHECK_EQ(round_trip(t, name, 101, 0, 0644, 0), 3 * 512);
  CHECK_EQ(round_trip(t, name, 600, 0, 0644, 0), 4 * 512);
  /* every permission bit kept, the type bits never written; a time before 1970 is written as 0 */
  round_trip(t, "m", 1, 3, 07777, 1);
  round_trip(t, "m", 1, 3, 0100644, -20);
  round_trip(t, "big-time", 8, 3, 0600, 8589934591LL); /* 11 octal digits: the field's largest */
  free(name);
}

/* The pax record counts its own digits: "%d path=NAME\n" is exactly that many bytes. */
static void counts_the_record_exactly(ut_run *t) {
  static const size_t lengths[] = {101, 989, 990, 994};
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
    size_t nlen = lengths[i];
    char *name = malloc(nlen);
    unsigned char *out = malloc(CAP_TAR_HEADER_MAX(nlen));
    REQUIRE(CHECK(name && out));
    memset(name, 'n', nlen);
    size_t h = cap_tar_header(out, CAP_TAR_HEADER_MAX(nlen), name, nlen, 0, 0644, 0);
    size_t rec = (size_t)strtoul((const char *)out + 512, NULL, 10);
    CHECK_EQ(out[156], 'x');
    CHECK_EQ(out[512 + rec - 1], '\n');
    char prefix[16];
    int pl = snprintf(prefix, sizeof prefix, "%zu path=", rec);
    CHECK_EQ(rec, (size_t)pl + nlen + 1);
    CHECK_EQ(h, 512 * (2 + (rec + 511) / 512));
    free(name);
    free(out);
  }
}

/* CAP_TAR_HEADER_MAX(nlen) is room enough for every name length a member may have. */
static void fits_every_name_length(ut_run *t) {
  unsigned char *out = malloc(CAP_TAR_HEADER_MAX(FP_PATH_MAX));
  char *name = malloc(FP_PATH_MAX);
  REQUIRE(CHECK(out && name));
  memset(name, 'n', FP_PATH_MAX);
  size_t unfit = 0, first = 0;
  for (size_t nlen = 1; nlen < FP_PATH_MAX; nlen++) {
    if (cap_tar_header(out, CAP_TAR_HEADER_MAX(nlen), name, nlen, 1, 0644, 0) > 0) continue;
    if (!unfit++) first = nlen;
  }
  if (!CHECK_EQ(unfit, 0)) NOTE("the first name length that does not fit: %zu bytes", first);
  free(out);
  free(name);
}

static void refuses_a_short_buffer(ut_run *t) {
  unsigned char out[CAP_TAR_HEADER_MAX(300)];
  char name[300];
  memset(name, 'n', sizeof name);
  CHECK_EQ(cap_tar_header(out, 511, "a", 1, 0, 0644, 0), 0);
  CHECK_EQ(cap_tar_header(out, 512, "a", 1, 0, 0644, 0), 512);
  CHECK_EQ(cap_tar_header(out, 3 * 512 - 1, name, sizeof name, 0, 0644, 0), 0);
  CHECK_EQ(cap_tar_header(out, 3 * 512, name, sizeof name, 0, 0644, 0), 3 * 512);
}

/* The seeds: 2 bytes of size, 2 of mode, 4 of mtime (big-endian), then the name. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  REQUIRE(CHECK(len > 8));
  size_t size = (size_t)data[0] << 8 | data[1];
  unsigned mode = ((unsigned)data[2] << 8 | data[3]) & 07777;
  long long mtime = (long long)((uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 | data[7]);
  size_t h = round_trip(t, (const char *)data + 8, len - 8, size, mode, mtime);
  if (strcmp(name, "short") == 0) {
    CHECK_MEM(data + 8, len - 8, "hello.txt", 9);
    CHECK_EQ(h, 512);
  } else if (strcmp(name, "long") == 0) {
    CHECK_EQ(len - 8, 169);
    CHECK_EQ(h, 3 * 512);
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "capture_tar_roundtrip");
  UT_RUN(&t, reads_back_every_shape);
  UT_RUN(&t, counts_the_record_exactly);
  UT_RUN(&t, fits_every_name_length);
  UT_RUN(&t, refuses_a_short_buffer);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_tar_roundtrip", seed, NULL);
  return ut_end(&t);
}
