/* sandstack-init's children: the service's process, started as the engine would have started
 * it, and every process that ends up the init's child (orphans are re-parented to a PID
 * namespace's first process), reaped so none stays a zombie. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "init/init.h"

pid_t init_spawn(char *const argv[]) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  /* the child: its own process group (a signal the init passes on reaches the service, not the
   * init), in the terminal's foreground when there is one (SIGTTOU is still blocked here) */
  setpgid(0, 0);
  if (isatty(STDIN_FILENO)) tcsetpgrp(STDIN_FILENO, getpgrp());
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < 65; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(argv[0], argv);
  int e = errno;
  fprintf(stderr, "sandstack-init: %s: %s\n", argv[0], strerror(e));
  _exit(e == ENOENT ? 127 : 126);
}

int init_reap(pid_t service, int *status) {
  int found = 0, st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
    if (pid == service) {
      *status = st;
      found = 1;
    }
  }
  return found;
}
