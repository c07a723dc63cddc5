/* sandstack-reap TOKEN: ends one exec's processes inside a sandbox. The Engine API has no exec
 * kill, so the host starts this program in a short-lived helper container that shares the
 * sandbox's PID namespace (HostConfig.PidMode "container:<id>", no network, every capability
 * dropped but KILL, SYS_PTRACE and DAC_READ_SEARCH, which reading another user's
 * /proc/PID/environ takes). It is linked statically and uploaded into the helper, so the
 * sandbox's image needs no shell, no kill and no writable root (docs/session.md, "How an exec
 * is killed").
 *
 * The exec was created with SANDSTACK_EXEC=TOKEN in its environment; the Engine starts every
 * exec as a session and process group leader. The targets are: each process whose environment
 * holds that entry, each member of a session or process group such a process leads, and every
 * descendant of a target. Each round stops every target (so none can fork meanwhile), then
 * kills them all, and scans again, until a scan finds none alive. PID 1 and this program are
 * never targets. The environment is data the sandbox controls: it is only compared, byte for
 * byte, with the whole entry.
 *
 * Exit 0: nothing of the exec is left (stdout: the number killed); 1: something outlived
 * every round; 2: bad usage or /proc unreadable.
 *
 * sandstack-reap TOKEN SIGNAL (a number other than SIGKILL's) is a spawned process's
 * p:kill(signal): one scan, the signal sent to each process holding the entry (the process
 * may catch it, so nothing is stopped or waited for). Exit 0 when one was signalled, 3 when no
 * process holds the entry any more (the process ended). SIGNAL 9 is the reap above, with
 * exit 3 when its first scan finds nothing of the exec. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reap/proc.h"

enum { ROUNDS = 20 };

/* Marks targets in the table: token holders, members of what they lead, then descendants until
 * nothing changes. Returns how many are marked. */
static size_t mark(rp_table *t, const char *entry, size_t elen) {
  for (size_t i = 0; i < t->n; i++) t->p[i].target = t->p[i].holder = rp_environ_has(t->p[i].pid, entry, elen);
  for (size_t i = 0; i < t->n; i++) {
    if (t->p[i].target) continue;
    for (size_t j = 0; j < t->n; j++) {
      if (!t->p[j].holder) continue;
      if (t->p[i].pgid == t->p[j].pid || t->p[i].sid == t->p[j].pid) t->p[i].target = 1;
    }
  }
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t i = 0; i < t->n; i++) {
      if (t->p[i].target) continue;
      for (size_t j = 0; j < t->n; j++) {
        if (t->p[j].target && t->p[i].ppid == t->p[j].pid) {
          t->p[i].target = 1;
          changed = 1;
          break;
        }
      }
    }
  }
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) n += t->p[i].target != 0;
  return n;
}

/* Sends sig once to every holder of the entry: 0 when one was signalled, 3 when none holds it. */
static int signal_holders(rp_table *t, const char *entry, size_t elen, int sig) {
  if (rp_scan(t, getpid()) != 0) {
    perror("sandstack-reap: /proc");
    return 2;
  }
  unsigned long sent = 0;
  for (size_t i = 0; i < t->n; i++)
    if (rp_environ_has(t->p[i].pid, entry, elen) && kill(t->p[i].pid, sig) == 0) sent++;
  printf("%lu\n", sent);
  return sent > 0 ? 0 : 3;
}

int main(int argc, char **argv) {
  int sig = SIGKILL;
  if (argc == 3) {
    char *end = NULL;
    long v = strtol(argv[2], &end, 10);
    if (!end || *end || v < 1 || v > 64) argc = 0; /* refused below */
    else sig = (int)v;
  }
  if ((argc != 2 && argc != 3) || strlen(argv[1]) < 8 || strlen(argv[1]) > 128) {
    fputs("usage: sandstack-reap TOKEN [SIGNAL]\n", stderr);
    return 2;
  }
  char entry[160];
  int elen = snprintf(entry, sizeof entry, "SANDSTACK_EXEC=%s", argv[1]);
  rp_table t = {0};
  if (sig != SIGKILL) {
    int rc = signal_holders(&t, entry, (size_t)elen, sig);
    free(t.p);
    return rc;
  }
  unsigned long killed = 0;
  for (int round = 0; round < ROUNDS; round++) {
    if (rp_scan(&t, getpid()) != 0) {
      perror("sandstack-reap: /proc");
      return 2;
    }
    size_t n = mark(&t, entry, (size_t)elen);
    if (n == 0 && round == 0 && argc == 3) return 3; /* p:kill("KILL") of a process that ended */
    if (n == 0) {
      printf("%lu\n", killed);
      return 0;
    }
    for (size_t i = 0; i < t.n; i++)
      if (t.p[i].target) kill(t.p[i].pid, SIGSTOP);
    for (size_t i = 0; i < t.n; i++)
      if (t.p[i].target && kill(t.p[i].pid, SIGKILL) == 0) killed++;
    usleep(2000u * (unsigned)(round + 1)); /* the kernel tears them down; their parents reap */
  }
  fprintf(stderr, "sandstack-reap: processes of the exec outlived %d rounds\n", ROUNDS);
  return 1;
}
