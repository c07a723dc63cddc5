/* libFuzzer target: guest paths driven through the file plane against a real temporary tree.
 *
 * The tree holds links to /, /etc, a directory outside the workspace, a sibling workspace and a
 * relative link climbing out. Every input runs one operation (stat, read with or without a
 * per-call limit, write (which makes missing parents), mkdir, opendir, check with or without
 * the child rule, or normalize) with either resolver and one of several per-call working
 * directories, then asserts that nothing outside the workspace was read, written or created:
 * the canaries' contents never come back, the outside directories' change times never move, a
 * relative path never normalizes above its working directory, and check never clears the
 * workspace root or a working directory (or an ancestor of one) for removal. Input: byte 0 picks
 * the resolver (bit 0), the operation (bits 1-3), the per-call cwd (bits 4-5) and the check
 * rule or read limit (bit 6); byte 1 a prefix that steers into the links; the rest is the path
 * (NUL bytes included). */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The plane's sources are compiled into this target rather than taken from sandstack_core:
 * the core library is built without -fsanitize=fuzzer-no-link, so only code in this file gives
 * the fuzzer coverage feedback. The archive's copies are then never pulled in. */
#include "fileplane/errors.c"
#include "fileplane/names.c"
#include "fileplane/ops.c"
#include "fileplane/path.c"
#include "fileplane/plane.c"
#include "fileplane/read.c"
#include "fileplane/resolve.c"
#include "fileplane/write.c"

static char base[64];
static char canary[] = "FUZZ-CANARY-5d1f0c";
static fp_plane *planes[2];
static struct stat watched_before[4];
static char watched[4][128];

static void must(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_fileplane_path setup: %s\n", what);
    abort();
  }
}

static void put(const char *path, const char *data) {
  FILE *f = fopen(path, "w");
  must(f != NULL, path);
  fputs(data, f);
  fclose(f);
}

static void sub(char *out, size_t cap, const char *rel) { snprintf(out, cap, "%s/%s", base, rel); }

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* The tree goes when the fuzzer exits (FTW_PHYS: never into the links). */
static void teardown(void) {
  for (int i = 0; i < 2; i++) fp_close(planes[i]);
  nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* tmpfs when there is one: the fuzzer creates many small files */
  snprintf(base, sizeof base, "%s/sstest-fileplane-fuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  must(mkdtemp(base) != NULL, "mkdtemp");
  atexit(teardown);
  char p[256], q[256];
  const char *dirs[] = {"ws", "ws/work", "ws/work/a", "ws/work/a/b", "outside", "outside/p", "sibling", "sibling/p"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    sub(p, sizeof p, dirs[i]);
    must(mkdir(p, 0755) == 0, p);
  }
  sub(p, sizeof p, "outside/canary");
  put(p, canary);
  sub(p, sizeof p, "outside/p/canary");
  put(p, canary);
  sub(p, sizeof p, "sibling/canary");
  put(p, canary);
  sub(p, sizeof p, "ws/work/a/b/file");
  put(p, "inside");
  sub(q, sizeof q, "outside");
  const struct {
    const char *link, *target;
  } links[] = {{"ws/work/l_root", "/"},   {"ws/work/l_etc", "/etc"},        {"ws/work/a/l_out", q},
               {"ws/l_sib", NULL},        {"ws/work/a/b/l_up", "../../../.."}, {"ws/work/l_canary", NULL}};
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    char target[256];
    if (links[i].target) snprintf(target, sizeof target, "%s", links[i].target);
    else if (strcmp(links[i].link, "ws/l_sib") == 0) sub(target, sizeof target, "sibling");
    else sub(target, sizeof target, "outside/canary");
    sub(p, sizeof p, links[i].link);
    must(symlink(target, p) == 0, p);
  }
  /* A hard link to an outside file, as a host mistake would leave one. */
  sub(p, sizeof p, "outside/canary");
  sub(q, sizeof q, "ws/work/hard");
  must(link(p, q) == 0, q);
  sub(p, sizeof p, "ws");
  for (int i = 0; i < 2; i++) {
    fp_options o = {.root = p, .max_read = 1 << 20, .resolve = i ? FP_RESOLVE_WALK : FP_RESOLVE_AUTO};
    ss_error e;
    ss_error_init(&e);
    planes[i] = fp_open(&o, &e);
    must(planes[i] != NULL, e.message);
  }
  sub(watched[0], sizeof watched[0], "outside");
  sub(watched[1], sizeof watched[1], "sibling");
  sub(watched[2], sizeof watched[2], "outside/p");
  snprintf(watched[3], sizeof watched[3], "/etc");
  for (int i = 0; i < 4; i++) must(stat(watched[i], &watched_before[i]) == 0, watched[i]);
  return 0;
}

static const char *const prefixes[] = {
    "",          "l_root/",  "l_etc/",    "a/l_out/",  "/sandstack/l_sib/", "a/b/l_up/", "l_canary", "hard",
    "../",       "../../",   "/sandstack/", "/sandstack/work/a/b/", "/etc/",  "a/./b//",  "/sandstack/../", "a/b/file",
};

/* The per-call working directories: the plane's own, a relative and an absolute one below it,
 * and one reached through a link (every operation through it must be refused). */
static const char *const cwds[] = {NULL, "a", "/sandstack/work/a/b", "l_root"};

/* p is the guest path g (absolute, normalized) or one of its ancestors. */
static int holds(const char *p, const char *g) {
  size_t n = strlen(p);
  return strncmp(p, g, n) == 0 && (g[n] == '\0' || g[n] == '/');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  fp_plane *p = planes[data[0] & 1];
  int op = (data[0] >> 1) % 8;
  const char *cwd_text = cwds[(data[0] >> 4) & 3];
  int variant = (data[0] >> 6) & 1;
  fp_path cwd_buf, *cwd = NULL;
  char cwd_guest[FP_PATH_MAX + 512] = "/sandstack/work";
  if (cwd_text) {
    ss_error ce;
    ss_error_init(&ce);
    if (fp_normalize(p, NULL, cwd_text, strlen(cwd_text), &cwd_buf, &ce) != 0) abort();
    if (fp_guest_path(p, &cwd_buf, cwd_guest, sizeof cwd_guest, &ce) != 0) abort();
    cwd = &cwd_buf;
  }
  const char *pre = prefixes[data[1] % (sizeof prefixes / sizeof *prefixes)];
  size_t plen = strlen(pre), n = plen + size - 2;
  char *path = malloc(n + 1);
  if (!path) return 0;
  memcpy(path, pre, plen);
  memcpy(path + plen, data + 2, size - 2);
  path[n] = '\0';
  ss_error e;
  ss_error_init(&e);
  struct stat st;
  char *buf = NULL, guest[FP_PATH_MAX + 512];
  size_t got = 0;
  fp_path rel;
  switch (op) {
    case 0:
      if (fp_lstat(p, cwd, path, n, &st, &e) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)strlen(canary) &&
          st.st_nlink == 1) {
        /* a regular canary-sized file: must be one the fuzzer wrote inside, never the canary */
        struct stat c;
        sub(guest, sizeof guest, "outside/canary");
        if (stat(guest, &c) == 0 && c.st_ino == st.st_ino) abort();
      }
      break;
    case 1:
      if (fp_read(p, cwd, path, n, variant ? 5 : 0, &buf, &got, &e) == 0) {
        if (got >= strlen(canary) && memmem(buf, got, canary, strlen(canary))) abort();
        if (variant && got > 5) abort(); /* past the call's own limit */
        free(buf);
      }
      break;
    case 2: fp_write(p, cwd, path, n, "fuzz", 4, &e); break;
    case 3: fp_mkdir(p, cwd, path, n, &e); break;
    case 4: {
      int fd = fp_opendir(p, cwd, path, n, &e);
      if (fd >= 0) {
        /* nothing outside may be listed: the canaries' directories hold a "canary" entry,
         * which no path inside has unless the fuzzer wrote one (then it is not outside) */
        struct stat ds, os;
        sub(guest, sizeof guest, "outside");
        if (fstat(fd, &ds) == 0 && stat(guest, &os) == 0 && ds.st_ino == os.st_ino) abort();
        close(fd);
      }
      break;
    }
    case 5:
    case 6:
      if (fp_check(p, cwd, path, n, variant ? FP_CHECK_CHILD : 0, guest, sizeof guest, &e) >= 0) {
        /* cleared for removal: never the root, nor a working directory or what holds one */
        if (holds(guest, "/sandstack/work") || holds(guest, cwd_guest)) abort();
        if (variant && path[0] != '/') {
          size_t cl = strlen(cwd_guest);
          if (strncmp(guest, cwd_guest, cl) != 0 || guest[cl] != '/' || strchr(guest + cl + 1, '/')) abort();
        }
      }
      break;
    default:
      if (fp_normalize(p, cwd, path, n, &rel, &e) == 0) {
        if (fp_guest_path(p, &rel, guest, sizeof guest, &e) == 0) {
          if (strncmp(guest, "/sandstack", 10) != 0 || (guest[10] != '\0' && guest[10] != '/')) abort();
          /* a relative path stays at or below its working directory */
          if (path[0] != '/' && !holds(cwd_guest, guest)) abort();
          if (strstr(guest, "/../") || strstr(guest, "/./") || strstr(guest, "//")) abort();
          size_t gl = strlen(guest);
          if (gl >= 3 && strcmp(guest + gl - 3, "/..") == 0) abort();
        }
      }
      break;
  }
  ss_error_clear(&e);
  free(path);
  for (int i = 0; i < 4; i++) {
    struct stat now;
    if (stat(watched[i], &now) != 0) abort();
    if (now.st_mtim.tv_sec != watched_before[i].st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != watched_before[i].st_mtim.tv_nsec ||
        now.st_ctim.tv_nsec != watched_before[i].st_ctim.tv_nsec) {
      fprintf(stderr, "%s changed\n", watched[i]);
      abort();
    }
  }
  return 0;
}
