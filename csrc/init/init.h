#ifndef SANDSTACK_INIT_H
#define SANDSTACK_INIT_H
/* sandstack-init, a sandbox's PID 1 (main.c): the parts of the program that make system calls.
 * The decisions are csrc/deadline's. */
#include <sys/types.h>

#include "deadline/deadline.h"

/* Reads DL_DIR/DL_FILE through dirfd: 0 with *deadline set, -1 when it is missing, not a
 * regular file or not one deadline line (a write the host has not finished). */
int init_read_deadline(int dirfd, int64_t *deadline);

/* Starts argv (execvp, as the engine would) in a child of its own process group, in the
 * foreground of the terminal when there is one, with every signal unblocked and at its default
 * action. The child's pid, or -1 (errno set) when fork failed. An exec that fails ends the
 * child with 127 (not found) or 126, as a shell does. */
pid_t init_spawn(char *const argv[]);

/* Reaps every child that has ended; sets *status when `service` was one of them and returns 1
 * then, else 0. */
int init_reap(pid_t service, int *status);

/* sandstack-init --check [-- TEST...] (check.c): the engine's health check of a sandbox whose
 * runtime lets the guest stop or kill its PID 1 (gVisor). Its exit status, or it execs TEST. */
int init_check(char *const test[]);

#endif
