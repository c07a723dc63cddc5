/* sandstack-init -- COMMAND [ARG...]: a sandbox's PID 1, which ends every process of the
 * sandbox at its deadline whether or not any process of sandstack is alive then (docs/lifecycle.md,
 * "What holds the deadline"). sandstack's plan makes it the sandbox's Entrypoint, in front of
 * the command the engine would have run (csrc/stack/init_wrap.h); the program and its deadline
 * file are written into the stack's DL_DIR volume, read-only in the sandbox, before every start
 * (csrc/deadline/deadline.h). It is linked statically: the sandbox's image needs nothing of it.
 * sandstack-init --check is the health check under a runtime that does not protect a PID 1
 * (check.c).
 *
 * It runs COMMAND as its child, passes on to it the signals the engine sends (a stop, a kill)
 * and reaps every orphan, as tini does, and ends with the child's status. At the deadline it sends SIGTERM to every process of the
 * sandbox, waits DL_GRACE_MS for them to end, sends SIGKILL, and exits DL_EXIT_DEADLINE (124):
 * the container stops, and the kernel kills whatever the init's exit leaves in its PID
 * namespace. A later deadline (h:set_timeout) is the same file written again: the init reads it
 * when the engine sends DL_CONTROL_SIGNAL, and every WAIT_CAP_MS in any case.
 *
 * What the guest cannot do to it: the kernel drops every signal sent from inside the namespace
 * to its first process unless that process handles it, and SIGKILL and SIGSTOP always (the init
 * handles signals by blocking them all and reading them with sigtimedwait: none ends or stops
 * it); it is not dumpable, so without CAP_SYS_PTRACE no guest process reads or writes its memory
 * or its environment (/proc/1/mem, ptrace); its deadline is in its memory, a file no guest can
 * write and the wall clock, which no guest without CAP_SYS_TIME moves. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "init/init.h"

/* The longest wait: the deadline file is read again after it, and a step of the host's clock is
 * seen within it. */
enum { WAIT_CAP_MS = 5000, ENDING_POLL_MS = 100 };

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A blocked signal, waited for at most ms (-1: no limit); 0 when none came. *outside: it was
 * sent from outside the sandbox (the engine's stop or kill): kill(2) from a process the
 * namespace cannot see arrives as SI_USER with pid 0, which no process inside can forge (its own
 * kill carries its pid, a sigqueue another code). */
static int next_signal(const sigset_t *set, long long ms, int *outside) {
  struct timespec ts, *limit = NULL;
  if (ms >= 0) {
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    limit = &ts;
  }
  siginfo_t info;
  int sig = sigtimedwait(set, &info, limit);
  *outside = sig > 0 && info.si_code == SI_USER && info.si_pid == 0;
  return sig > 0 ? sig : 0;
}

/* The end has begun: SIGTERM to every process of the namespace but the init (kill(-1) from a
 * namespace's first process reaches its namespace only), SIGCONT so a stopped one can act on
 * it. */
static void begin_end(void) {
  fputs("sandstack-init: the deadline passed: ending every process of the sandbox\n", stderr);
  kill(-1, SIGTERM);
  kill(-1, SIGCONT);
}

/* Whether any process but the init is left. */
static int others_left(void) { return !(kill(-1, 0) != 0 && errno == ESRCH); }

/* The deadline file read again: a moved deadline is taken (and said). */
static void reread(int dirfd, dl_state *st) {
  int64_t deadline;
  if (init_read_deadline(dirfd, &deadline) == 0 && dl_take(st, deadline))
    fprintf(stderr, "sandstack-init: the deadline is now %lld\n", (long long)deadline);
}

int main(int argc, char **argv) {
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* first: no window in which a guest could attach */
  if (argc >= 2 && strcmp(argv[1], "--check") == 0)
    return init_check(argc >= 4 && strcmp(argv[2], "--") == 0 ? argv + 3 : NULL);
  if (argc < 3 || strcmp(argv[1], "--") != 0) {
    fputs("usage: sandstack-init -- COMMAND [ARG...] | sandstack-init --check [-- TEST...]\n", stderr);
    return 2;
  }
  if (getpid() != 1) { /* at its deadline it signals every process it may: only ever as a PID 1 */
    fputs("sandstack-init: not the first process of a PID namespace: refusing to run\n", stderr);
    return 2;
  }
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  int dirfd = open(DL_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  dl_state st = {.deadline = 0, .ending = 0};
  if (dirfd < 0 || init_read_deadline(dirfd, &st.deadline) != 0) {
    fputs("sandstack-init: no deadline file in " DL_DIR ": start the stack through sandstack\n", stderr);
    return DL_EXIT_BOOT;
  }
  if (dl_due(&st, now_ms())) {
    fputs("sandstack-init: the deadline has passed: nothing started\n", stderr);
    return DL_EXIT_DEADLINE;
  }
  pid_t service = init_spawn(argv + 2);
  if (service < 0) {
    perror("sandstack-init: fork");
    return 126;
  }
  int64_t end_at = 0;
  for (;;) {
    int64_t t = now_ms();
    long long ms = dl_wait_ms(&st, t, WAIT_CAP_MS);
    if (st.ending) ms = end_at - t < ENDING_POLL_MS ? (end_at > t ? end_at - t : 0) : ENDING_POLL_MS;
    int outside = 0;
    int sig = ms == 0 ? 0 : next_signal(&all, ms, &outside);
    int status;
    if (sig == SIGCHLD) {
      if (init_reap(service, &status) && !st.ending) return dl_exit_status(status);
    } else if (sig > 0 && outside && !st.ending && dl_forwarded(sig)) {
      kill(service, sig); /* the guest's own, to PID 1, are dropped, as the kernel drops them for
                             a first process without a handler: it signals the service directly */
    }
    if (!st.ending) reread(dirfd, &st); /* after DL_CONTROL_SIGNAL, and after every wait */
    if (!st.ending && dl_due(&st, now_ms())) {
      st.ending = 1;
      begin_end();
      end_at = now_ms() + DL_GRACE_MS;
    }
    if (st.ending) {
      init_reap(service, &status);
      if (!others_left()) return DL_EXIT_DEADLINE;
      if (now_ms() >= end_at) {
        kill(-1, SIGKILL);
        return DL_EXIT_DEADLINE; /* and the kernel kills what is left in the namespace */
      }
    }
  }
}
