/* The init's decisions, apart from the system calls that carry them out (csrc/init/main.c):
 * when the deadline moves, how long to wait, which signal goes to the service, which status the
 * init ends with. */
#include <signal.h>
#include <sys/wait.h>

#include "deadline/deadline.h"

int dl_take(dl_state *s, int64_t deadline) {
  if (s->ending || deadline == s->deadline) return 0; /* final once begun */
  s->deadline = deadline;
  return 1;
}

int dl_due(const dl_state *s, int64_t now_ms) {
  return s->deadline > 0 && now_ms >= s->deadline * 1000;
}

long long dl_wait_ms(const dl_state *s, int64_t now_ms, long long cap_ms) {
  if (s->deadline <= 0) return cap_ms;
  long long left = (long long)(s->deadline * 1000 - now_ms);
  if (left <= 0) return 0;
  return left < cap_ms ? left : cap_ms;
}

int dl_forwarded(int sig) {
  switch (sig) {
    /* raised by the kernel for the receiver's own fault: never meant for the service */
    case SIGFPE: case SIGILL: case SIGSEGV: case SIGBUS: case SIGABRT: case SIGTRAP: case SIGSYS:
    /* the init's own: a child's end, a terminal's stop of a background reader or writer */
    case SIGCHLD: case SIGTTIN: case SIGTTOU:
    case DL_CONTROL_SIGNAL:
      return 0;
    default:
      return sig > 0 && sig < 65 && sig != SIGKILL && sig != SIGSTOP;
  }
}

int dl_exit_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}
