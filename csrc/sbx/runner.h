#ifndef SANDSTACK_SBX_RUNNER_H
#define SANDSTACK_SBX_RUNNER_H
/* Runs one subprocess (the sbx CLI) with a deadline and capped, captured streams.
 *
 * The child is created with clone(2) and an exit signal of 0, so the kernel sends no SIGCHLD
 * for it and a host's own `waitpid(-1, ...)` reaper (nginx installs one) cannot steal its
 * status: wait(2) without __WALL ignores such "clone children". Nothing process-wide is
 * touched: no signal handler, no signal mask, no environment. The child runs in its own
 * process group, so a deadline or an output cap kills the sbx client and whatever it spawned. */
#include <stddef.h>

#include "util/error.h"

typedef struct ss_run_opts {
  const char *const *argv; /* argv[0] is looked up on PATH when it has no '/' */
  const char *const *envp; /* NULL: inherit the caller's environment */
  double timeout;          /* seconds; <= 0 means 60 */
  size_t max_output;       /* stdout + stderr together; 0 means 8 MiB */
  const char *stdin_data;  /* NULL: stdin is /dev/null */
  size_t stdin_len;
} ss_run_opts;

typedef struct ss_run_result {
  char *out, *err; /* NUL-terminated for convenience; lengths below are exact */
  size_t out_len, err_len;
  int exited;      /* 1 when the child exited normally */
  int exit_code;   /* valid when exited */
  int term_signal; /* the signal that ended it, else 0 */
  int timed_out;   /* the deadline passed; the child's group was killed */
  int over_limit;  /* more than the output cap arrived; the child's group was killed */
} ss_run_result;

/* 0 on a completed run (whatever the child's status), -1 with e set when it could not start. */
int ss_run(const ss_run_opts *o, ss_run_result *r, ss_error *e);
void ss_run_result_free(ss_run_result *r);

#endif
