/* The subprocess runner: clone without SIGCHLD, pidfd + pipes in one poll loop. */
#include "sbx/runner.h"

#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

extern char **environ;

/* PATH lookup in the parent: the child may only make raw system calls before execve. */
static char *resolve(const char *file) {
  if (strchr(file, '/')) return strdup(file);
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  size_t fl = strlen(file);
  while (*path) {
    const char *end = strchr(path, ':');
    size_t dl = end ? (size_t)(end - path) : strlen(path);
    if (dl > 0 && dl + fl + 2 < PATH_MAX) {
      char buf[PATH_MAX];
      memcpy(buf, path, dl);
      buf[dl] = '/';
      memcpy(buf + dl + 1, file, fl + 1);
      if (access(buf, X_OK) == 0) return strdup(buf);
    }
    if (!end) break;
    path = end + 1;
  }
  return NULL;
}

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* The host's descriptors that lack O_CLOEXEC (a Lua io.open file, nginx's listening sockets)
 * must not reach sbx or what it spawns: close everything above stderr before the exec. Kernels
 * before 5.9 have no close_range; there a bounded loop does the same (raw calls only here). */
static void close_above_stdio(void) {
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
  for (int fd = 3; fd < 65536; fd++) syscall(SYS_close, fd);
}

/* Runs in the cloned intermediate process, a copy of the caller's memory that never execs (an
 * exec would reset its exit signal to SIGCHLD): only system calls from here on. It drops the
 * caller's signal handlers (a host's SIGCHLD reaper must not run here), leads a new process
 * group, forks the program, waits for it and hands its wait status over the status pipe. */
static void intermediate(const char *path, char *const argv[], char *const envp[], const int io[3],
                         const int close_fds[4], int status_fd) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int s = 1; s < 32; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  syscall(SYS_setpgid, 0, 0);
  pid_t g = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, NULL);
  if (g == 0) {
    for (int i = 0; i < 3; i++)
      if (syscall(SYS_dup2, io[i], i) < 0) syscall(SYS_exit_group, 127);
    close_above_stdio();
    syscall(SYS_execve, path, argv, envp);
    syscall(SYS_exit_group, 127);
  }
  /* The intermediate only needs its status pipe while it waits: drop the host's other
   * descriptors too, so a listening socket is not held open by it after its owner closes it. */
  for (int i = 0; i < 4; i++)
    if (close_fds[i] >= 0) syscall(SYS_close, close_fds[i]);
  if (status_fd > 3) syscall(SYS_close_range, 3U, (unsigned)status_fd - 1, 0U);
  syscall(SYS_close_range, (unsigned)status_fd + 1, ~0U, 0U);
  int st = 127 << 8;
  if (g > 0)
    while (syscall(SYS_wait4, g, &st, 0, NULL) < 0 && errno == EINTR) {
    }
  syscall(SYS_write, status_fd, &st, sizeof st);
  syscall(SYS_exit_group, 0);
}

static int append(char **buf, size_t *len, size_t *cap, const char *src, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t nc = *cap ? *cap : 4096;
    while (nc < *len + n + 1) nc *= 2;
    char *nb = realloc(*buf, nc);
    if (!nb) return -1;
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, src, n);
  *len += n;
  (*buf)[*len] = 0;
  return 0;
}

static int killed_by_us(const ss_run_result *r) { return r->timed_out || r->over_limit; }

static void kill_group(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
}

void ss_run_result_free(ss_run_result *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

int ss_run(const ss_run_opts *o, ss_run_result *r, ss_error *e) {
  memset(r, 0, sizeof *r);
  double timeout = o->timeout > 0 ? o->timeout : 60;
  size_t cap = o->max_output ? o->max_output : (size_t)8 << 20;
  if (!o->argv || !o->argv[0]) {
    ss_error_set(e, "invalid", "empty_argv", "no program to run");
    return -1;
  }
  char *path = resolve(o->argv[0]);
  if (!path) {
    ss_error_set(e, "sbx", "not_found", "%s: not found on PATH", o->argv[0]);
    return -1;
  }
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1}, ps[2] = {-1, -1}, devnull = -1, pidfd = -1;
  int rc = -1;
  if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(ps, O_CLOEXEC)) goto sys_fail;
  if (o->stdin_data) {
    if (pipe2(pi, O_CLOEXEC)) goto sys_fail;
  } else if ((devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
    goto sys_fail;
  }
  int in_fd = o->stdin_data ? pi[0] : devnull;
  char *const *envp = (char *const *)(o->envp ? o->envp : (const char *const *)environ);

  const int io[3] = {in_fd, po[1], pe[1]};
  const int close_fds[4] = {in_fd, po[1], pe[1], ps[0]};
  /* Exit signal 0: no SIGCHLD, and invisible to a host's waitpid(-1) (only __WALL/__WCLONE see
   * such children). The intermediate never execs, so it keeps that exit signal. */
  pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)CLONE_PIDFD, NULL, &pidfd, NULL, NULL);
  if (pid == 0) intermediate(path, (char *const *)o->argv, envp, io, close_fds, ps[1]);
  if (pid < 0 && errno == EINVAL) { /* kernels before 5.2: no pidfd, poll by timer */
    pidfd = -1;
    pid = (pid_t)syscall(SYS_clone, 0UL, NULL, NULL, NULL, NULL);
    if (pid == 0) intermediate(path, (char *const *)o->argv, envp, io, close_fds, ps[1]);
  }
  if (pid < 0) goto sys_fail;
  close(po[1]);
  close(pe[1]);
  close(ps[1]);
  po[1] = pe[1] = ps[1] = -1;
  if (devnull >= 0) close(devnull), devnull = -1;
  if (pi[0] >= 0) close(pi[0]), pi[0] = -1;
  if (pi[1] >= 0) fcntl(pi[1], F_SETFL, O_NONBLOCK);

  size_t ocap = 0, ecap = 0, in_off = 0, total = 0;
  double deadline = ss_monotonic_now() + timeout, grace_end = 0;
  int status = 0, reaped = 0, killed = 0;
  char chunk[65536];
  for (;;) {
    if (!reaped) {
      pid_t w = (pid_t)wait4(pid, &status, WNOHANG | __WALL, NULL);
      if (w == pid) {
        reaped = 1;
        grace_end = ss_monotonic_now() + 1.0; /* a daemonised grandchild may hold the pipes open */
      }
    }
    int open_pipes = (po[0] >= 0) + (pe[0] >= 0);
    if (reaped && (!open_pipes || ss_monotonic_now() > grace_end)) break;
    double t = ss_monotonic_now();
    if (!killed && t >= deadline) {
      r->timed_out = 1;
      kill_group(pid);
      killed = 1;
    }
    if (killed && !open_pipes) { /* the group is dead; collect the status */
      if (!reaped && wait4(pid, &status, __WALL, NULL) == pid) reaped = 1;
      break;
    }
    struct pollfd pf[4];
    int n = 0, io = -1, ie = -1, ii = -1, ip = -1;
    if (po[0] >= 0) pf[io = n++] = (struct pollfd){po[0], POLLIN, 0};
    if (pe[0] >= 0) pf[ie = n++] = (struct pollfd){pe[0], POLLIN, 0};
    if (pi[1] >= 0) pf[ii = n++] = (struct pollfd){pi[1], POLLOUT, 0};
    if (pidfd >= 0 && !reaped) pf[ip = n++] = (struct pollfd){pidfd, POLLIN, 0};
    double left = (reaped ? grace_end : (killed ? t + 1 : deadline)) - t;
    int ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
    if (pidfd < 0 && !reaped && ms > 20) ms = 20; /* no pidfd: look at the child often */
    int pr = poll(pf, (nfds_t)n, ms);
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) continue;
    int *fds[2] = {&po[0], &pe[0]};
    int idx[2] = {io, ie};
    for (int k = 0; k < 2; k++) {
      if (idx[k] < 0 || !(pf[idx[k]].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(*fds[k], chunk, sizeof chunk);
      if (got <= 0) {
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        close(*fds[k]);
        *fds[k] = -1;
        continue;
      }
      size_t keep = (size_t)got;
      if (total + keep > cap) keep = cap - total;
      int fail = k == 0 ? append(&r->out, &r->out_len, &ocap, chunk, keep)
                        : append(&r->err, &r->err_len, &ecap, chunk, keep);
      if (fail) {
        kill_group(pid);
        killed = 1;
        ss_error_set(e, "sbx", "oom", "out of memory capturing output");
        break;
      }
      total += keep;
      /* Exactly cap bytes are a whole answer; only a byte past it is over the budget. */
      if (keep < (size_t)got) {
        if (!killed) {
          r->over_limit = 1;
          kill_group(pid);
          killed = 1;
        }
        /* stop reading: nothing more is kept */
        if (po[0] >= 0) close(po[0]), po[0] = -1;
        if (pe[0] >= 0) close(pe[0]), pe[0] = -1;
      }
    }
    if (ss_error_isset(e)) break;
    if (ii >= 0 && (pf[ii].revents & (POLLOUT | POLLERR | POLLHUP))) {
      /* When the child is gone without reading (sbx failed early), the write raises SIGPIPE,
       * which would end the host: block it in this thread only and take back the one raised. */
      sigset_t sp, old;
      sigemptyset(&sp);
      sigaddset(&sp, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &sp, &old);
      ssize_t w = write(pi[1], o->stdin_data + in_off, o->stdin_len - in_off);
      int werr = errno;
      if (w < 0 && werr == EPIPE && !sigismember(&old, SIGPIPE))
        sigtimedwait(&sp, NULL, &(struct timespec){0, 0});
      pthread_sigmask(SIG_SETMASK, &old, NULL);
      errno = werr;
      if (w > 0) in_off += (size_t)w;
      if (w < 0 && errno != EAGAIN && errno != EINTR) in_off = o->stdin_len;
      if (in_off >= o->stdin_len) close(pi[1]), pi[1] = -1;
    }
    if (ip >= 0 && (pf[ip].revents & POLLIN) && !reaped) {
      if (wait4(pid, &status, WNOHANG | __WALL, NULL) == pid) {
        reaped = 1;
        grace_end = ss_monotonic_now() + 1.0;
      }
    }
    (void)ip;
  }
  if (!reaped) {
    kill_group(pid);
    if (wait4(pid, &status, __WALL, NULL) == pid) reaped = 1;
  }
  if (reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !killed_by_us(r)) {
    /* the intermediate exited: the program's own wait status is in the status pipe */
    int st;
    if (read(ps[0], &st, sizeof st) == (ssize_t)sizeof st) status = st;
    else status = 127 << 8;
  }
  if (reaped) {
    if (WIFEXITED(status)) {
      r->exited = 1;
      r->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r->term_signal = WTERMSIG(status);
    }
  }
  if (!r->out) append(&r->out, &r->out_len, &ocap, "", 0);
  if (!r->err) append(&r->err, &r->err_len, &ecap, "", 0);
  rc = ss_error_isset(e) ? -1 : 0;
  goto done;
sys_fail:
  ss_error_set(e, "sbx", "spawn", "cannot run %s: %s", o->argv[0], strerror(errno));
done:
  for (int i = 0; i < 2; i++) {
    if (po[i] >= 0) close(po[i]);
    if (pe[i] >= 0) close(pe[i]);
    if (pi[i] >= 0) close(pi[i]);
    if (ps[i] >= 0) close(ps[i]);
  }
  if (devnull >= 0) close(devnull);
  if (pidfd >= 0) close(pidfd);
  free(path);
  if (rc != 0 && (r->out || r->err)) ss_run_result_free(r);
  return rc;
}
