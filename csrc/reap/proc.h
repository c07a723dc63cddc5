#ifndef SANDSTACK_REAP_PROC_H
#define SANDSTACK_REAP_PROC_H
/* The process table as /proc shows it from inside the sandbox's PID namespace (reap.c). */
#include <stddef.h>
#include <sys/types.h>

typedef struct rp_proc {
  pid_t pid, ppid, pgid, sid;
  int holder; /* its environment holds the exec's entry */
  int target; /* to be stopped and killed */
} rp_proc;

typedef struct rp_table {
  rp_proc *p;
  size_t n, cap;
} rp_table;

/* Fills t with every live process but PID 1 and `self` (zombies are dead already: skipped).
 * 0, or -1 with errno set when /proc cannot be read. */
int rp_scan(rp_table *t, pid_t self);

/* 1 when /proc/PID/environ holds exactly the entry (len bytes, no NUL) as one of its entries;
 * 0 otherwise, also when it cannot be read (the process is gone). */
int rp_environ_has(pid_t pid, const char *entry, size_t len);

#endif
