/* sandstack-init's deadline file (csrc/deadline/format.c), its decisions (rules.c) and its
 * reads of the directory (files.c), in a temporary directory: a link, a FIFO (which must not
 * block the read), a directory, a file too large. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deadline/deadline.h"
#include "test/unit.h"

static void the_file_round_trips_and_refuses_anything_else(ut_run *t) {
  char out[DL_FILE_MAX];
  int n = dl_format(1765000000, out, sizeof out);
  REQUIRE(CHECK(n > 0));
  CHECK_STR(out, "sandstack-init 1 deadline 1765000000\n");
  int64_t d = -1;
  CHECK_EQ(dl_parse(out, (size_t)n, &d), 0);
  CHECK_EQ(d, 1765000000);
  n = dl_format(0, out, sizeof out);
  CHECK_EQ(dl_parse(out, (size_t)n, &d), 0);
  CHECK_EQ(d, 0);
  CHECK_EQ(dl_format(-1, out, sizeof out), -1);
  CHECK_EQ(dl_format(DL_NUMBER_MAX + 1, out, sizeof out), -1);
  CHECK_EQ(dl_format(5, out, 10), -1); /* too small a buffer */
  static const char *const bad[] = {
      "", "sandstack-init 1 deadline \n", "sandstack-init 1 deadline 17", /* cut before its newline */
      "sandstack-init 1 deadline 017\n", "sandstack-init 1 deadline -17\n", "sandstack-init 1 deadline 1 \n",
      "sandstack-init 1 deadline 1234567890123456\n", "sandstack-init 2 deadline 17\n",
      "sandstack-init 1 deadline 17\n\n", "sandstack-init 1 deadline 1x\n", " sandstack-init 1 deadline 17\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d = 42;
    if (!CHECK_EQ(dl_parse(bad[i], strlen(bad[i]), &d), -1)) NOTE("case %zu: %s", i, bad[i]);
    CHECK_EQ(d, 42);
  }
}

static void the_deadline_moves_until_the_end_begins(ut_run *t) {
  dl_state s = {.deadline = 100, .ending = 0};
  CHECK_EQ(dl_take(&s, 100), 0);
  CHECK_EQ(dl_take(&s, 200), 1); /* later */
  CHECK_EQ(s.deadline, 200);
  CHECK_EQ(dl_take(&s, 50), 1); /* earlier */
  CHECK_EQ(dl_take(&s, 0), 1);  /* none */
  CHECK_EQ(s.deadline, 0);
  s.deadline = 100;
  s.ending = 1;
  CHECK_EQ(dl_take(&s, 900), 0); /* final */
  CHECK_EQ(s.deadline, 100);
}

static void waits_until_the_deadline_within_the_cap(ut_run *t) {
  dl_state s = {.deadline = 0};
  CHECK_EQ(dl_wait_ms(&s, 5000, 5000), 5000); /* none: the file is read again at the cap */
  CHECK(!dl_due(&s, 1LL << 50));
  s.deadline = 100; /* 100 000 ms */
  CHECK_EQ(dl_wait_ms(&s, 99000, 5000), 1000);
  CHECK_EQ(dl_wait_ms(&s, 10000, 5000), 5000);
  CHECK_EQ(dl_wait_ms(&s, 100000, 5000), 0);
  CHECK_EQ(dl_wait_ms(&s, 200000, 5000), 0);
  CHECK(!dl_due(&s, 99999));
  CHECK(dl_due(&s, 100000));
}

static void passes_on_what_tini_passes_on(ut_run *t) {
  static const int on[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGPIPE, SIGALRM, 34, 62, 64};
  static const int off[] = {SIGKILL, SIGSTOP, SIGCHLD, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP,
                            SIGSYS, SIGTTIN, SIGTTOU, SIGSTKFLT, 0, 65};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
    if (!CHECK(dl_forwarded(on[i]))) NOTE("signal %d", on[i]);
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
    if (!CHECK(!dl_forwarded(off[i]))) NOTE("signal %d", off[i]);
}

static void ends_with_the_service_status(ut_run *t) {
  pid_t p = fork();
  if (p == 0) _exit(7);
  int st;
  waitpid(p, &st, 0);
  CHECK_EQ(dl_exit_status(st), 7);
  p = fork();
  if (p == 0) {
    pause();
    _exit(0);
  }
  kill(p, SIGTERM);
  waitpid(p, &st, 0);
  CHECK_EQ(dl_exit_status(st), 128 + SIGTERM);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void reads_only_small_regular_files_without_blocking(ut_run *t) {
  char dir[] = "/tmp/sandstack-deadline-XXXXXX";
  REQUIRE(CHECK(mkdtemp(dir) != NULL));
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  REQUIRE(CHECK(dfd >= 0));
  char buf[DL_FILE_MAX];
  write_file(dir, "plain", "hello");
  CHECK_EQ(dl_read_file(dfd, "plain", buf, sizeof buf), 5);
  CHECK_SPAN(buf, 5, "hello");
  CHECK_EQ(dl_read_file(dfd, "missing", buf, sizeof buf), -1);
  /* a link to a readable file is not followed */
  write_file(dir, "target", "sandstack-init 1 deadline 17\n");
  CHECK_EQ(symlinkat("target", dfd, "link"), 0);
  CHECK_EQ(dl_read_file(dfd, "link", buf, sizeof buf), -1);
  /* a FIFO with no writer: an open for reading would wait forever; this returns at once */
  CHECK_EQ(mkfifoat(dfd, "fifo", 0600), 0);
  CHECK_EQ(dl_read_file(dfd, "fifo", buf, sizeof buf), -1);
  CHECK_EQ(mkdirat(dfd, "adir", 0700), 0);
  CHECK_EQ(dl_read_file(dfd, "adir", buf, sizeof buf), -1);
  /* one byte more than the cap: refused whole, never read in part */
  char big[DL_FILE_MAX + 2];
  memset(big, 'x', DL_FILE_MAX + 1);
  big[DL_FILE_MAX + 1] = '\0';
  write_file(dir, "big", big);
  CHECK_EQ(dl_read_file(dfd, "big", buf, sizeof buf), -1);
  big[DL_FILE_MAX] = '\0';
  write_file(dir, "fits", big);
  CHECK_EQ(dl_read_file(dfd, "fits", buf, sizeof buf), DL_FILE_MAX);
  unlinkat(dfd, "fits", 0);
  unlinkat(dfd, "big", 0);
  unlinkat(dfd, "plain", 0);
  unlinkat(dfd, "link", 0);
  unlinkat(dfd, "target", 0);
  unlinkat(dfd, "fifo", 0);
  unlinkat(dfd, "adir", AT_REMOVEDIR);
  close(dfd);
  CHECK_EQ(rmdir(dir), 0);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "deadline_rules");
  UT_RUN(&t, the_file_round_trips_and_refuses_anything_else);
  UT_RUN(&t, the_deadline_moves_until_the_end_begins);
  UT_RUN(&t, waits_until_the_deadline_within_the_cap);
  UT_RUN(&t, passes_on_what_tini_passes_on);
  UT_RUN(&t, ends_with_the_service_status);
  UT_RUN(&t, reads_only_small_regular_files_without_blocking);
  return ut_end(&t);
}
