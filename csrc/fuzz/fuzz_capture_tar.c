/* libFuzzer target: the capture's archive reader and writer, extracting into a real directory.
 *
 * Every input is unpacked by cap_extract into a fresh 0700 directory (cap_fresh_dir) inside a
 * per-process base that also holds a canary file. After each run the target walks what was
 * written and aborts if anything breaks the capture's rules: an object that is not a regular
 * file or a directory, a set-id/sticky or group/other write bit, a foreign owner, a hard link,
 * anything new beside the output directory, a changed canary, /etc touched,
 * an error of an unexpected kind, or counters that do not add up. Then cap_remove_dir removes
 * the output (the rollback path) and the target checks that it is gone.
 *
 * Input: byte 0 is a control byte, the rest the archive. With bit 0 set the target first
 * rewrites the checksum of every header it can find by walking the archive's size fields, so
 * mutations get past the checksum to the name, type and pax logic; with it clear the archive
 * goes in verbatim (the checksum and framing checks get fuzzed too). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The capture's sources are compiled into this target, so that the fuzzer sees their coverage
 * (the core library of the fuzz build is not instrumented for it), as fuzz_fileplane_path does. */
#include "capture/errors.c"
#include "capture/extract.c"
#include "capture/names.c"
#include "capture/pax.c"
#include "capture/tar_reader.c"
#include "capture/tree.c"

static char base[64];
static char out[96];
static char canary_path[96];
static const char canary[] = "FUZZ-CAPTURE-CANARY-7c2e";
static struct stat etc_before;

static void must(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_capture_tar: %s (%s)\n", what, strerror(errno));
    abort();
  }
}

static void teardown(void) {
  ss_error e;
  ss_error_init(&e);
  cap_remove_dir(out, &e); /* absent unless a run was cut short */
  ss_error_clear(&e);
  unlink(canary_path);
  rmdir(base);
}

static void setup(void) {
  const char *shm = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(base, sizeof base, "%s/sandstack-fuzz-capture.XXXXXX", shm);
  must(mkdtemp(base) != NULL, "mkdtemp");
  snprintf(out, sizeof out, "%s/out", base);
  snprintf(canary_path, sizeof canary_path, "%s/canary", base);
  FILE *f = fopen(canary_path, "w");
  must(f != NULL, "canary");
  fputs(canary, f);
  fclose(f);
  must(stat("/etc", &etc_before) == 0, "stat /etc");
  atexit(teardown);
}

typedef struct mem {
  const uint8_t *p;
  size_t n, at;
} mem;

static ssize_t mem_read(void *ctx, void *buf, size_t n) {
  mem *m = ctx;
  size_t k = m->n - m->at < n ? m->n - m->at : n;
  /* Hand out odd-sized pieces: the reader must cope with short reads. */
  if (k > 7 && (m->at % 3) == 0) k = k / 2 + 1;
  memcpy(buf, m->p + m->at, k);
  m->at += k;
  return (ssize_t)k;
}

/* Rewrites the checksums of the headers found by following the octal size fields. */
static void fix_checksums(uint8_t *a, size_t n) {
  size_t at = 0;
  while (at + CAP_BLOCK <= n) {
    uint8_t *b = a + at;
    unsigned long sum = 0;
    for (size_t i = 0; i < CAP_BLOCK; i++) sum += (i >= 148 && i < 156) ? ' ' : b[i];
    if (sum == 8 * ' ') break; /* a zero block: the end */
    char ck[8];
    snprintf(ck, sizeof ck, "%06lo", sum & 0777777);
    memcpy(b + 148, ck, 6);
    b[154] = '\0';
    b[155] = ' ';
    uint64_t size = 0;
    if (parse_number(b + 124, 12, &size) != 0 || size > n) size = 0;
    char t = (char)b[156];
    if (t == '1' || t == '2' || t == '3' || t == '4' || t == '5' || t == '6') size = 0;
    at += CAP_BLOCK + (size_t)((size + CAP_BLOCK - 1) / CAP_BLOCK) * CAP_BLOCK;
  }
}

static uid_t me;

static int check_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)flag;
  (void)ftw;
  if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) {
    fprintf(stderr, "not a file or directory: %s\n", path);
    abort();
  }
  if (st->st_mode & 07022) {
    fprintf(stderr, "forbidden mode %o: %s\n", (unsigned)st->st_mode, path);
    abort();
  }
  if (st->st_uid != me) {
    fprintf(stderr, "foreign owner %u: %s\n", (unsigned)st->st_uid, path);
    abort();
  }
  if (S_ISREG(st->st_mode) && st->st_nlink != 1) {
    fprintf(stderr, "hard link: %s\n", path);
    abort();
  }
  if (S_ISDIR(st->st_mode) && (st->st_mode & 0700) != 0700) {
    fprintf(stderr, "directory the owner cannot use: %s\n", path);
    abort();
  }
  return 0;
}

/* The base holds the canary and, when expect_out, the output directory: nothing else. */
static void check_base(int expect_out) {
  DIR *d = opendir(base);
  must(d != NULL, "opendir base");
  int n = 0, saw_out = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    n++;
    if (strcmp(de->d_name, "out") == 0) saw_out = 1;
    else if (strcmp(de->d_name, "canary") != 0) {
      fprintf(stderr, "written beside the output: %s\n", de->d_name);
      abort();
    }
  }
  closedir(d);
  if (saw_out != expect_out || n != 1 + expect_out) {
    fprintf(stderr, "the base holds %d entries (output %s)\n", n, saw_out ? "present" : "missing");
    abort();
  }
  char buf[64] = {0};
  FILE *f = fopen(canary_path, "r");
  must(f != NULL, "open canary");
  size_t k = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  if (k != strlen(canary) || memcmp(buf, canary, k) != 0) {
    fprintf(stderr, "the canary changed\n");
    abort();
  }
  struct stat st;
  must(stat("/etc", &st) == 0, "stat /etc");
  if (st.st_mtim.tv_sec != etc_before.st_mtim.tv_sec || st.st_mtim.tv_nsec != etc_before.st_mtim.tv_nsec) {
    fprintf(stderr, "/etc changed\n");
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!base[0]) {
    setup();
    me = geteuid();
  }
  if (size < 1) return 0;
  uint8_t *a = malloc(size);
  must(a != NULL, "malloc");
  memcpy(a, data + 1, size - 1);
  if (data[0] & 1) fix_checksums(a, size - 1);

  ss_error e;
  ss_error_init(&e);
  must(cap_fresh_dir(out, &e) == 0, "cap_fresh_dir");
  int dirfd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  must(dirfd >= 0, "open out");
  mem m = {a, size - 1, 0};
  cap_source src = {mem_read, &m};
  cap_options o = {256 * 1024, 256};
  cap_result res;
  memset(&res, 0, sizeof res);
  int rc = cap_extract(dirfd, &src, &o, &res, &e);
  close(dirfd);
  if (rc != 0) {
    if (strcmp(e.kind, "engine") != 0 && strcmp(e.kind, "output_limit") != 0) {
      fprintf(stderr, "unexpected error kind %s: %s\n", e.kind, e.message);
      abort();
    }
  } else if (res.files + res.dirs + res.nskipped > res.entries || res.bytes > o.max_bytes ||
             res.entries > o.max_entries) {
    fprintf(stderr, "counters do not add up\n");
    abort();
  }
  for (size_t i = 0; i < res.nskipped; i++) {
    if (!res.skipped[i].type || !res.skipped[i].reason || res.skipped[i].len > CAP_SKIP_NAME_MAX) abort();
  }
  ss_error_clear(&e);
  cap_result_free(&res);

  check_base(1);
  must(nftw(out, check_entry, 16, FTW_PHYS) == 0, "walk the output");
  must(cap_remove_dir(out, &e) == 0, "cap_remove_dir");
  check_base(0);
  free(a);
  return 0;
}
