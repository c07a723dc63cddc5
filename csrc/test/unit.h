#ifndef SANDSTACK_TEST_UNIT_H
#define SANDSTACK_TEST_UNIT_H
/* The C unit tests' own harness (no framework: Debian's packages only). A test program is one
 * concept (csrc/test/test_<concept>.c, registered with ctest by CMakeLists.txt); it runs its
 * test functions with UT_RUN and ends with ut_end, which makes the process exit non-zero when a
 * check failed or none ran. A check that fails prints file:line, the expression and the values
 * (the first 40 failures; the rest are counted), and the run goes on.
 *
 * The state is a ut_run the program owns (no global state): every test function is
 * `static void name(ut_run *t)`, and the CHECK macros use that `t`. */
#include <stddef.h>
#include <string.h>

typedef struct ut_run {
  const char *program; /* the program's name, for the summary line */
  const char *test;    /* the test function (or seed) running now */
  char seed[256];      /* "seed <target>/<file>" while ut_each_seed runs one */
  unsigned checks, failures;
} ut_run;

void ut_begin(ut_run *t, const char *program);
/* Prints the summary; the process's exit status: 0 only when checks ran and none failed. */
int ut_end(ut_run *t);

/* Each returns whether the check held; a failure is counted and printed. */
int ut_check(ut_run *t, int ok, const char *expr, const char *file, int line);
void ut_fail(ut_run *t, const char *what, const char *file, int line);
/* A line of context after a failed check ("case 3"), printed as the failures are. */
void ut_note(ut_run *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ut_check_int(ut_run *t, long long a, long long b, const char *ea, const char *eb, const char *file, int line);
int ut_check_str(ut_run *t, const char *a, const char *b, const char *ea, const char *eb, const char *file, int line);
int ut_check_mem(ut_run *t, const void *a, size_t alen, const void *b, size_t blen, const char *ea, const char *eb,
                 const char *file, int line);

#define UT_RUN(t, fn) ((t)->test = #fn, fn(t))
/* the same for a test function that takes one more argument, a fixture: fn(t, arg) */
#define UT_RUN_WITH(t, fn, arg) ((t)->test = #fn, fn((t), (arg)))

/* cond is true */
#define CHECK(cond) ut_check(t, (cond) != 0, #cond, __FILE__, __LINE__)
/* two integers (any integer or enum type) are equal */
#define CHECK_EQ(a, b) ut_check_int(t, (long long)(a), (long long)(b), #a, #b, __FILE__, __LINE__)
/* two C strings are equal (NULL equals only NULL) */
#define CHECK_STR(a, b) ut_check_str(t, (a), (b), #a, #b, __FILE__, __LINE__)
/* two byte ranges are equal */
#define CHECK_MEM(a, alen, b, blen) ut_check_mem(t, (a), (alen), (b), (blen), #a, #b, __FILE__, __LINE__)
/* a byte range (pointer and length) holds exactly the C string str */
#define CHECK_SPAN(p, n, str) ut_check_mem(t, (p), (n), (str), strlen(str), #p, #str, __FILE__, __LINE__)
/* a failure without a condition: what says what went wrong */
#define FAIL(what) ut_fail(t, (what), __FILE__, __LINE__)
/* context for the failure just reported, printf-style */
#define NOTE(...) ut_note(t, __VA_ARGS__)
/* returns from the test function when check (one of the macros above) failed: for a check the
 * rest depends on, such as a pointer it reads */
#define REQUIRE(check)                         \
  do {                                         \
    if (!(check)) return;                      \
  } while (0)

/* The fuzz targets' seed corpus csrc/fuzz/corpus/<target>/ as test cases: fn is called with
 * each file's bytes (malloc'd, freed after the call) and its name, in name order. corpus_dir is
 * csrc/fuzz/corpus (ctest passes it as the program's first argument). A check fails when the
 * directory cannot be read or holds no seed. Returns how many seeds ran. */
typedef void (*ut_seed_fn)(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx);
size_t ut_each_seed(ut_run *t, const char *corpus_dir, const char *target, ut_seed_fn fn, void *ctx);

#endif
