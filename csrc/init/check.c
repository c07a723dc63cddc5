/* sandstack-init --check [-- TEST...]: the engine's health check of a sandbox whose runtime lets
 * a guest process stop or kill the sandbox's PID 1. Linux drops SIGSTOP and SIGKILL sent to a PID
 * namespace's first process from inside it; gVisor (runsc 2024-07-29, measured) delivers both.
 * A killed init ends the sandbox (its exit is the container's), but a stopped one cannot act at
 * the deadline. So under such a runtime the plan makes this the sandbox's health check, which
 * the engine execs every DL_CHECK_INTERVAL_S seconds with no process of sandstack alive, from the
 * read-only volume no guest can change: it continues a stopped PID 1, and past the deadline it
 * kills every process of the sandbox and PID 1 itself, so the container stops. Then it runs the
 * user's own health test when there is one (TEST: its status is the check's), or reports
 * healthy. It acts only when PID 1 is sandstack-init, so it can never signal a host's processes. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "init/init.h"

/* Whether PID 1 runs DL_PROGRAM (its first argument, from /proc/1/cmdline). */
static int pid1_is_init(void) {
  char buf[sizeof DL_PROGRAM + 1] = {0};
  int fd = open("/proc/1/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return n >= (ssize_t)sizeof DL_PROGRAM && memcmp(buf, DL_PROGRAM, sizeof DL_PROGRAM) == 0; /* and its NUL */
}

int init_check(char *const test[]) {
  if (!pid1_is_init()) {
    fputs("sandstack-init --check: PID 1 is not sandstack-init: refusing to act\n", stderr);
    return 2;
  }
  int dirfd = open(DL_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int64_t deadline = 0;
  int known = dirfd >= 0 && init_read_deadline(dirfd, &deadline) == 0;
  if (dirfd >= 0) close(dirfd);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  dl_state st = {.deadline = known ? deadline : 0, .ending = 0};
  if (dl_due(&st, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000)) {
    fputs("sandstack-init --check: the deadline passed: ending every process of the sandbox\n", stderr);
    kill(-1, SIGKILL); /* every process this one may signal, itself and PID 1 aside */
    kill(1, SIGKILL);  /* a stopped init too: its end is the container's */
    return 1;
  }
  kill(1, SIGCONT); /* a stopped init goes on; a running one reads it as a signal and drops it */
  if (test && test[0]) {
    execvp(test[0], test);
    perror("sandstack-init --check: the health test");
    return 1;
  }
  return 0;
}
