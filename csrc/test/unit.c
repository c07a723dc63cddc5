/* The harness of csrc/test (see unit.h). Failures go to stderr, which ctest shows with
 * --output-on-failure; the summary line goes to stdout. */
#include "test/unit.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ut_begin(ut_run *t, const char *program) {
  memset(t, 0, sizeof *t);
  t->program = program;
}

int ut_end(ut_run *t) {
  printf("%s: %u checks, %u failed\n", t->program, t->checks, t->failures);
  if (t->checks == 0) fprintf(stderr, "%s: no check ran\n", t->program);
  return t->checks == 0 || t->failures ? 1 : 0;
}

/* The first UT_SHOWN failures are printed, the rest only counted: a check in a loop can fail
 * hundreds of times. */
#define UT_SHOWN 40

static int shown(const ut_run *t) { return t->failures <= UT_SHOWN; }

/* Counts a failure and starts its line; 0 when it is not shown. */
static int failed(ut_run *t, const char *file, int line) {
  if (++t->failures == UT_SHOWN + 1) fprintf(stderr, "(further failures are counted, not shown)\n");
  if (!shown(t)) return 0;
  fprintf(stderr, "%s:%d: in %s: ", file, line, t->test ? t->test : "main");
  return 1;
}

void ut_note(ut_run *t, const char *fmt, ...) {
  if (!shown(t)) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("  (", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(")\n", stderr);
  va_end(ap);
}

int ut_check(ut_run *t, int ok, const char *expr, const char *file, int line) {
  t->checks++;
  if (ok) return 1;
  if (failed(t, file, line)) fprintf(stderr, "CHECK(%s) failed\n", expr);
  return 0;
}

void ut_fail(ut_run *t, const char *what, const char *file, int line) {
  t->checks++;
  if (failed(t, file, line)) fprintf(stderr, "%s\n", what);
}

int ut_check_int(ut_run *t, long long a, long long b, const char *ea, const char *eb, const char *file, int line) {
  t->checks++;
  if (a == b) return 1;
  if (failed(t, file, line)) fprintf(stderr, "CHECK_EQ(%s, %s) failed: %lld != %lld\n", ea, eb, a, b);
  return 0;
}

/* The bytes as a C string literal, at most 300 of them: control and non-ASCII bytes escaped. */
static void print_bytes(const void *p, size_t n) {
  const unsigned char *s = p;
  fputc('"', stderr);
  for (size_t i = 0; i < n && i < 300; i++) {
    unsigned char c = s[i];
    if (c == '\r') fputs("\\r", stderr);
    else if (c == '\n') fputs("\\n", stderr);
    else if (c == '"' || c == '\\') fprintf(stderr, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) fprintf(stderr, "\\x%02x", c);
    else fputc(c, stderr);
  }
  fputs(n > 300 ? "\"..." : "\"", stderr);
  fprintf(stderr, " (%zu bytes)", n);
}

int ut_check_str(ut_run *t, const char *a, const char *b, const char *ea, const char *eb, const char *file, int line) {
  t->checks++;
  if ((a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0)) return 1;
  if (!failed(t, file, line)) return 0;
  fprintf(stderr, "CHECK_STR(%s, %s) failed:\n  ", ea, eb);
  if (a) print_bytes(a, strlen(a));
  else fputs("NULL", stderr);
  fputs("\n  ", stderr);
  if (b) print_bytes(b, strlen(b));
  else fputs("NULL", stderr);
  fputc('\n', stderr);
  return 0;
}

int ut_check_mem(ut_run *t, const void *a, size_t alen, const void *b, size_t blen, const char *ea, const char *eb,
                 const char *file, int line) {
  t->checks++;
  if (alen == blen && (alen == 0 || memcmp(a, b, alen) == 0)) return 1;
  size_t at = 0;
  while (at < alen && at < blen && ((const unsigned char *)a)[at] == ((const unsigned char *)b)[at]) at++;
  if (!failed(t, file, line)) return 0;
  fprintf(stderr, "CHECK_MEM(%s, %s) failed: they differ from byte %zu\n  ", ea, eb, at);
  print_bytes(a, alen);
  fputs("\n  ", stderr);
  print_bytes(b, blen);
  fputc('\n', stderr);
  return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A whole file, malloc'd (NULL when it cannot be read). */
static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    unsigned char *more = realloc(buf, cap *= 2);
    if (!more) free(buf);
    buf = more;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

size_t ut_each_seed(ut_run *t, const char *corpus_dir, const char *target, ut_seed_fn fn, void *ctx) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", corpus_dir ? corpus_dir : "(no corpus directory given)", target);
  snprintf(t->seed, sizeof t->seed, "the seeds of %s", target);
  t->test = t->seed;
  char what[1100];
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(what, sizeof what, "cannot read the seed directory %s", dir);
    ut_fail(t, what, __FILE__, __LINE__);
    return 0;
  }
  char **names = NULL;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    char **more = realloc(names, (n + 1) * sizeof *names);
    if (!more) break;
    names = more;
    if (!(names[n] = strdup(de->d_name))) break;
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  snprintf(what, sizeof what, "no seed in %s", dir);
  if (n == 0) ut_fail(t, what, __FILE__, __LINE__);
  for (size_t i = 0; i < n; i++) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    size_t len = 0;
    unsigned char *data = read_all(path, &len);
    snprintf(t->seed, sizeof t->seed, "seed %s/%s", target, names[i]);
    if (data) fn(t, names[i], data, len, ctx);
    else ut_fail(t, "cannot read the seed file", __FILE__, __LINE__);
    free(data);
    free(names[i]);
  }
  free(names);
  return n;
}
