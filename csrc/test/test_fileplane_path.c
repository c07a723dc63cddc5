/* The file plane's path parser (csrc/fileplane/path.c): a guest path made relative to the
 * workspace on the string alone, never above where it starts, with the reason of each refusal
 * and the length limits. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fileplane/fileplane.h"
#include "test/unit.h"

/* Normalizes path (len bytes) from cwd (NULL: the plane's) and checks the relative path, or
 * with want_rel NULL the refusal's reason. */
static void normalizes(ut_run *t, fp_plane *p, const fp_path *cwd, const char *path, size_t len, const char *want_rel,
                       const char *want_reason) {
  fp_path *out = malloc(sizeof *out);
  ss_error e;
  ss_error_init(&e);
  int rc = fp_normalize(p, cwd, path, len, out, &e);
  if (want_rel) {
    if (CHECK_EQ(rc, 0)) {
      CHECK_STR(out->rel, want_rel);
      CHECK_EQ(out->len, strlen(want_rel));
      if (out->len) CHECK_STR(out->last, strrchr(want_rel, '/') ? strrchr(want_rel, '/') + 1 : want_rel);
      else CHECK(out->last == NULL);
    } else {
      NOTE("'%.60s': %s", path, e.message);
    }
  } else if (CHECK_EQ(rc, -1)) {
    CHECK_STR(e.kind, "invalid");
    if (!CHECK_STR(e.reason, want_reason)) NOTE("'%.60s'", path);
  } else {
    NOTE("'%.60s' gave '%s'", path, out->rel);
  }
  ss_error_clear(&e);
  free(out);
}

#define OK(p, path, rel) normalizes(t, p, NULL, path, strlen(path), rel, NULL)
#define REFUSED(p, path, reason) normalizes(t, p, NULL, path, strlen(path), NULL, reason)

static void resolves_dots_lexically(ut_run *t, fp_plane *p) {
  OK(p, "/sandstack/a/b", "a/b");
  OK(p, "/sandstack", "");
  OK(p, "/sandstack/./a//b/", "a/b");
  OK(p, "/./sandstack/a", "a");
  OK(p, "/sandstack/a/../b", "b");
  OK(p, "/sandstack/a/..", "");
  OK(p, "x/y", "work/x/y"); /* relative: from the plane's working directory */
  OK(p, "x/../y", "work/y");
  OK(p, ".", "work");
  OK(p, "./x/.", "work/x");
}

static void never_climbs_out(ut_run *t, fp_plane *p) {
  REFUSED(p, "..", "outside");
  REFUSED(p, "x/../..", "outside");
  REFUSED(p, "../work/x", "outside"); /* not even to come back */
  REFUSED(p, "/sandstack/..", "outside");
  REFUSED(p, "/sandstack/a/../../sandstack", "outside");
  REFUSED(p, "/etc/passwd", "outside");
  REFUSED(p, "/sandstackx/a", "outside");
  REFUSED(p, "/", "outside");
  REFUSED(p, "", "empty");
  normalizes(t, p, NULL, "a\0b", 3, NULL, "nul");
  ss_error e;
  ss_error_init(&e);
  fp_path out;
  CHECK_EQ(fp_normalize(p, NULL, "..", 2, &out, &e), -1);
  CHECK_STR(e.message, "'..' climbs above the working directory /sandstack/work");
  ss_error_clear(&e);
  CHECK_EQ(fp_normalize(p, NULL, "/etc", 4, &out, &e), -1);
  CHECK_STR(e.message, "'/etc' is not under /sandstack");
  const cJSON *field = cJSON_GetObjectItemCaseSensitive(e.fields, "path");
  CHECK(cJSON_IsString(field) && strcmp(field->valuestring, "/etc") == 0);
  ss_error_clear(&e);
}

/* A per-call working directory is a floor of its own. */
static void starts_at_the_callers_directory(ut_run *t, fp_plane *p) {
  fp_path *cwd = malloc(sizeof *cwd);
  ss_error e;
  ss_error_init(&e);
  REQUIRE(CHECK_EQ(fp_normalize(p, NULL, "/sandstack/w2/sub", 17, cwd, &e), 0));
  normalizes(t, p, cwd, "z", 1, "w2/sub/z", NULL);
  normalizes(t, p, cwd, "/sandstack/w2", 13, "w2", NULL); /* an absolute path ignores it */
  normalizes(t, p, cwd, "..", 2, NULL, "outside");
  free(cwd);
}

static void holds_the_length_limits(ut_run *t, fp_plane *p) {
  char *path = malloc(FP_PATH_MAX + 400), *want = malloc(FP_PATH_MAX + 400);
  REQUIRE(CHECK(path && want));
  /* one component: FP_NAME_MAX bytes pass, one more does not */
  strcpy(path, "/sandstack/");
  memset(path + 11, 'n', FP_NAME_MAX);
  path[11 + FP_NAME_MAX] = '\0';
  OK(p, path, path + 11);
  strcat(path, "n");
  REFUSED(p, path, "name_too_long");
  /* the whole: FP_PATH_MAX - 1 bytes pass (20 components of 200, one of 75), one more does not */
  size_t n = 0;
  for (int i = 0; i < 20; i++) {
    if (n) want[n++] = '/';
    memset(want + n, 'a' + i, 200);
    n += 200;
  }
  want[n++] = '/';
  memset(want + n, 'z', 75);
  n += 75;
  want[n] = '\0';
  CHECK_EQ(n, FP_PATH_MAX - 1);
  snprintf(path, FP_PATH_MAX + 400, "/sandstack/%s", want);
  OK(p, path, want);
  strcat(path, "z");
  REFUSED(p, path, "too_long");
  /* the guest path of a relative one, and a buffer too small for it */
  fp_path rel;
  ss_error e;
  ss_error_init(&e);
  REQUIRE(CHECK_EQ(fp_normalize(p, NULL, "/sandstack/a/b", 14, &rel, &e), 0));
  char guest[32];
  CHECK_EQ(fp_guest_path(p, &rel, guest, sizeof guest, &e), 0);
  CHECK_STR(guest, "/sandstack/a/b");
  CHECK_EQ(fp_guest_path(p, &rel, guest, 14, &e), -1);
  CHECK_STR(e.reason, "too_long");
  ss_error_clear(&e);
  free(path);
  free(want);
}

/* The plane's own options: where the guest sees the workspace, and its working directory. */
static void checks_the_planes_roots(ut_run *t, const char *root) {
  static const struct {
    const char *guest_root, *cwd, *reason;
  } cases[] = {
      {"/", NULL, "guest_root"},  {"relative", NULL, "guest_root"}, {"/a/../b", NULL, "guest_root"},
      {"/ws", "work", "cwd"},     {"/ws", "/elsewhere", "outside"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fp_options o = {.root = root, .guest_root = cases[i].guest_root, .cwd = cases[i].cwd};
    ss_error e;
    ss_error_init(&e);
    fp_plane *p = fp_open(&o, &e);
    if (!CHECK(p == NULL) || !CHECK_STR(e.reason, cases[i].reason)) NOTE("case %zu", i);
    fp_close(p);
    ss_error_clear(&e);
  }
  fp_options o = {.root = root, .guest_root = "//a//b/.", .cwd = "/a/b"};
  ss_error e;
  ss_error_init(&e);
  fp_plane *p = fp_open(&o, &e);
  REQUIRE(CHECK(p != NULL));
  normalizes(t, p, NULL, "/a/b/c", 6, "c", NULL);
  normalizes(t, p, NULL, "c", 1, "c", NULL);
  fp_close(p);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "fileplane_path");
  char root[] = "/tmp/sandstack-unit-fileplane-XXXXXX";
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  fp_options o = {.root = root}; /* guest_root /sandstack, cwd /sandstack/work */
  ss_error e;
  ss_error_init(&e);
  fp_plane *p = fp_open(&o, &e);
  if (ut_check(&t, p != NULL, "the plane opens", __FILE__, __LINE__)) {
    UT_RUN_WITH(&t, resolves_dots_lexically, p);
    UT_RUN_WITH(&t, never_climbs_out, p);
    UT_RUN_WITH(&t, starts_at_the_callers_directory, p);
    UT_RUN_WITH(&t, holds_the_length_limits, p);
  }
  fp_close(p);
  ss_error_clear(&e);
  UT_RUN_WITH(&t, checks_the_planes_roots, root);
  rmdir(root);
  return ut_end(&t);
}
