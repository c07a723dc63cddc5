/* A hostile guest's stand-in for the programs a host might borrow from its image (cp, sh, find,
 * md5sum, busybox, the dynamic loader): spec/docker_snapshot_guest_spec.lua builds it and puts
 * it over each of them in a sandbox. Whenever it runs, it writes a file SANDSTACK-IMPOSTOR-<its
 * name> into / and into every directory at the top of the root it can write (where a helper
 * container mounts volumes: /from, /to, /a, /b, ...), then does what /impostor-mode says:
 * "hang" waits forever; anything else prints a checksum line for a file that does not exist
 * and exits 0 (a cp that copied nothing, a find and an md5sum that lie). Run by the guest
 * itself (the test's control) it marks the guest's own workspace; run by anyone else, what that
 * one mounted.
 *
 * No libc, raw x86-64 system calls, position-independent: put over ld-linux-x86-64.so.2 the
 * kernel runs it as the interpreter of every dynamic program, where a libc's start-up code
 * would read the main program's headers as its own and crash. Build:
 *   cc -static-pie -nostdlib -fPIE -fno-stack-protector -O1 -o impostor guest_impostor.c */
#define SYS_read 0
#define SYS_write 1
#define SYS_close 3
#define SYS_pause 34
#define SYS_getdents64 217
#define SYS_exit_group 231
#define SYS_openat 257
#define AT_FDCWD (-100)
#define O_RDONLY 0
#define O_WRONLY 01
#define O_CREAT 0100
#define O_TRUNC 01000
#define O_DIRECTORY 0200000
#define DT_DIR 4

static long sys3(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}

static long sys4(long n, long a, long b, long c, long d) {
  long r;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
  return r;
}

static unsigned long len(const char *s) {
  unsigned long n = 0;
  while (s[n]) n++;
  return n;
}

/* dst = a b c (each may be empty), cut to cap - 1 */
static void join(char *dst, unsigned long cap, const char *a, const char *b, const char *c) {
  unsigned long n = 0;
  for (const char *parts[] = {a, b, c, 0}, **p = parts; *p; p++)
    for (const char *s = *p; *s && n + 1 < cap; s++) dst[n++] = *s;
  dst[n] = '\0';
}

static void mark(const char *dir, const char *name) {
  char path[512], file[300];
  join(file, sizeof file, "/SANDSTACK-IMPOSTOR-", name, "");
  join(path, sizeof path, dir, file, "");
  long fd = sys4(SYS_openat, AT_FDCWD, (long)path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  sys3(SYS_write, fd, (long)"ran as ", 7);
  sys3(SYS_write, fd, (long)name, (long)len(name));
  sys3(SYS_write, fd, (long)"\n", 1);
  sys3(SYS_close, fd, 0, 0);
}

struct dirent64 {
  unsigned long ino;
  long off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

__attribute__((noreturn, used)) void impostor_main(long *sp) {
  const char *argv0 = sp[0] > 0 ? (const char *)sp[1] : "impostor";
  const char *name = argv0;
  for (const char *s = argv0; *s; s++)
    if (*s == '/') name = s + 1;
  mark("", name);
  long root = sys4(SYS_openat, AT_FDCWD, (long)"/", O_RDONLY | O_DIRECTORY, 0);
  static char buf[16384];
  long n;
  while (root >= 0 && (n = sys3(SYS_getdents64, root, (long)buf, sizeof buf)) > 0) {
    for (long at = 0; at < n;) {
      struct dirent64 *d = (struct dirent64 *)(buf + at);
      at += d->reclen;
      if (d->type != DT_DIR || d->name[0] == '.') continue;
      if (!(d->name[0] == 'p' && d->name[1] == 'r' && d->name[2] == 'o' && d->name[3] == 'c' && !d->name[4])) {
        char dir[300];
        join(dir, sizeof dir, "/", d->name, "");
        mark(dir, name);
      }
    }
  }
  char mode[8] = {0};
  long fd = sys4(SYS_openat, AT_FDCWD, (long)"/impostor-mode", O_RDONLY, 0);
  if (fd >= 0) {
    sys3(SYS_read, fd, (long)mode, 4);
    sys3(SYS_close, fd, 0, 0);
  }
  if (mode[0] == 'h' && mode[1] == 'a' && mode[2] == 'n' && mode[3] == 'g')
    for (;;) sys3(SYS_pause, 0, 0, 0);
  static const char line[] = "d41d8cd98f00b204e9800998ecf8427e  ./impostor-was-here\n";
  sys3(SYS_write, 1, (long)line, sizeof line - 1);
  sys3(SYS_exit_group, 0, 0, 0);
  for (;;) {
  }
}

__asm__(".globl _start\n_start:\n  mov %rsp, %rdi\n  and $-16, %rsp\n  call impostor_main\n");
