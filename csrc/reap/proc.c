/* Reading /proc for sandstack-reap: what the kernel writes (stat) and what the sandbox can
 * write (environ, any bytes): both parsed with bounds and without trusting their contents. */
#include "reap/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ENVIRON_MAX = 1 << 20 }; /* bytes of an environment read at most */

static ssize_t read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n < cap) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  return (ssize_t)n;
}

/* Fields after the command name, which may hold spaces and parentheses: parsed from the last
 * ')'. 0, or -1 for a process that is gone or a zombie. */
static int read_stat(pid_t pid, rp_proc *p) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  ssize_t n = read_file(path, buf, sizeof buf - 1);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *close_paren = strrchr(buf, ')');
  if (!close_paren) return -1;
  char state;
  int ppid, pgid, sid;
  if (sscanf(close_paren + 1, " %c %d %d %d", &state, &ppid, &pgid, &sid) != 4) return -1;
  if (state == 'Z' || state == 'X' || state == 'x') return -1;
  p->pid = pid;
  p->ppid = ppid;
  p->pgid = pgid;
  p->sid = sid;
  p->holder = p->target = 0;
  return 0;
}

static int all_digits(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return 0;
  return 1;
}

int rp_scan(rp_table *t, pid_t self) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  t->n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!all_digits(e->d_name)) continue;
    long v = strtol(e->d_name, NULL, 10);
    if (v <= 1 || v == (long)self || v > 0x7fffffff) continue;
    if (t->n == t->cap) {
      size_t cap = t->cap ? t->cap * 2 : 256;
      rp_proc *np = realloc(t->p, cap * sizeof *np);
      if (!np) {
        closedir(d);
        errno = ENOMEM;
        return -1;
      }
      t->p = np;
      t->cap = cap;
    }
    if (read_stat((pid_t)v, &t->p[t->n]) == 0) t->n++;
  }
  closedir(d);
  return 0;
}

int rp_environ_has(pid_t pid, const char *entry, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
  char *buf = malloc(ENVIRON_MAX);
  if (!buf) return 0;
  ssize_t n = read_file(path, buf, ENVIRON_MAX);
  int found = 0;
  size_t at = 0, end = n > 0 ? (size_t)n : 0;
  while (at < end) {
    const char *nul = memchr(buf + at, '\0', end - at);
    size_t elen = nul ? (size_t)(nul - (buf + at)) : end - at;
    if (elen == len && memcmp(buf + at, entry, len) == 0) {
      found = 1;
      break;
    }
    at += elen + 1;
  }
  free(buf);
  return found;
}
