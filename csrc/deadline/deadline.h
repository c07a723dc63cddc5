#ifndef SANDSTACK_DEADLINE_H
#define SANDSTACK_DEADLINE_H
/* A sandbox's time limit, held inside it by sandstack-init (csrc/init), the sandbox's PID 1:
 * what the host and the init share (docs/lifecycle.md, "What holds the deadline").
 *
 * The init and its deadline file live in DL_DIR, a volume of the stack's own that the sandbox
 * mounts read-only: no guest process can write there, a root one without CAP_SYS_ADMIN cannot
 * remount it, so whatever the file says comes from the host. The host writes the volume through
 * a container of its own that mounts it read-write and never runs (the engine's archive API),
 * before every start of the sandbox and whenever h:set_timeout moves the deadline; then it has
 * the engine send DL_CONTROL_SIGNAL to the sandbox's PID 1, which reads the file again (it also
 * does every few seconds, so a lost signal costs a few seconds, never the deadline).
 *
 * The file is one line: "sandstack-init 1 deadline <epoch seconds>\n", 0 for none; a decimal
 * number of at most 15 digits, no leading zero. Pure: nothing here but files.c touches the
 * system. */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DL_DIR "/.sandstack"          /* the init's volume, read-only in the sandbox */
#define DL_PROGRAM DL_DIR "/init"     /* the init itself */
#define DL_FILE "deadline"            /* the deadline file's name in DL_DIR */
#define DL_CONTROL_SIGNAL 16          /* "read the deadline file again": SIGSTKFLT, which nothing uses (runsc knows no real-time signal by number) */
#define DL_FILE_MAX 128               /* a deadline file is at most this long */
#define DL_GRACE_MS 2000              /* from SIGTERM to SIGKILL at the deadline */
#define DL_CHECK_INTERVAL_S 5         /* the engine's health check under another runtime (main.c) */
#define DL_EXIT_DEADLINE 124          /* the init's exit status when the deadline ended the sandbox */
#define DL_EXIT_BOOT 125              /* no readable deadline file: nothing was started */
#define DL_NUMBER_MAX 999999999999999LL /* 15 digits */

/* The deadline file's line into out: its length, or -1 when the deadline is out of range (or
 * out is too small). */
int dl_format(int64_t deadline, char *out, size_t cap);
/* Parses a deadline file's bytes. 0 with *deadline set, or -1 when they are not one line. */
int dl_parse(const char *text, size_t len, int64_t *deadline);

/* The init's view of its deadline. */
typedef struct dl_state {
  int64_t deadline; /* epoch seconds; 0: none */
  int ending;       /* the deadline passed: the end has begun, and no later file changes it */
} dl_state;

/* Takes the deadline the file says now: 1 when it moved the state, 0 when it was the same or
 * the end has begun (final). */
int dl_take(dl_state *s, int64_t deadline);
/* 1 when the deadline has passed at now_ms (epoch milliseconds). */
int dl_due(const dl_state *s, int64_t now_ms);
/* How long the init may wait for a signal at now_ms, in milliseconds: until the deadline, at
 * most cap_ms (the file is read again after each wait, and a step of the host's clock is seen
 * within cap_ms); 0 when it is due. */
long long dl_wait_ms(const dl_state *s, int64_t now_ms, long long cap_ms);
/* 1 for the signals the init passes on to the service's process (as tini does): every one but
 * those the kernel raises for a fault of the receiver, the child's own SIGCHLD, the terminal's
 * stops and DL_CONTROL_SIGNAL. */
int dl_forwarded(int sig);
/* The init's exit status for the service's wait status, as a shell gives it: the exit code, or
 * 128 + the signal that ended it. */
int dl_exit_status(int wait_status);

/* Reads the regular file `name` of the directory dirfd into buf (at most cap bytes) without
 * blocking or following a link: -1 for a symlink, FIFO, device, directory, a file of more than
 * cap bytes or one that cannot be read; else its length. */
ssize_t dl_read_file(int dirfd, const char *name, char *buf, size_t cap);

#endif
