/* The engine's own process on this host, found through its unix socket: the kernel names the
 * process that listens there (SO_PEERCRED), so no pid file or process name is trusted. Read
 * from it in constant time: its open-file limit, how many files it has open (the size the
 * kernel gives /proc/PID/fd, from Linux 6.2; never a walk of that directory) and its command
 * line (the address pools it was started with). A value that cannot be read is left out and
 * named in `unread`: the caller says so, it does not fail. And a file as the engine sees it
 * (its daemon.json, which may be in a container of its own). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lua/binding.h"
#include "util/io.h"

enum { CMDLINE_MAX = 64 * 1024, LIMITS_MAX = 4096 };

/* The pid of the process listening on the unix socket at path, as this process's pid namespace
 * sees it; 0 (errno ESRCH) when it lives in a namespace this one cannot see. -1 with errno. */
static pid_t peer_pid(const char *path) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(sa.sun_path, path, strlen(path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct ucred cred;
  socklen_t len = sizeof cred;
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  if (rc == 0) rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
  int e = errno;
  close(fd);
  if (rc != 0) {
    errno = e;
    return -1;
  }
  if (cred.pid == 0) errno = ESRCH;
  return cred.pid;
}

static void unread(lua_State *L, int idx, const char *name, const char *fmt, const char *a, const char *b) {
  lua_pushfstring(L, fmt, a, b);
  lua_setfield(L, idx, name);
}

/* nofile: the soft "Max open files" of /proc/PID/limits; "unlimited" sets nofile_unlimited. */
static void read_nofile(lua_State *L, int out, int un, pid_t pid) {
  char path[64], buf[LIMITS_MAX];
  snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
  if (ss_read_head(path, buf, sizeof buf) < 0) {
    unread(L, un, "nofile", "%s: %s", path, strerror(errno));
    return;
  }
  const char *line = strstr(buf, "\nMax open files");
  if (!line) {
    unread(L, un, "nofile", "%s: %s", path, "no \"Max open files\" line");
    return;
  }
  line += strlen("\nMax open files");
  while (*line == ' ') line++;
  if (strncmp(line, "unlimited", 9) == 0) {
    lua_pushboolean(L, 1);
    lua_setfield(L, out, "nofile_unlimited");
    return;
  }
  char *end;
  long long v = strtoll(line, &end, 10);
  if (end == line || v < 0) {
    unread(L, un, "nofile", "%s: %s", path, "the soft limit is not a number");
    return;
  }
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, out, "nofile");
}

/* fds: the files open, as the kernel counts them for stat(2) of /proc/PID/fd (Linux 6.2 and
 * later; older kernels say 0, which is left out rather than read as "none open"). */
static void read_fds(lua_State *L, int out, int un, pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  struct stat st;
  if (stat(path, &st) != 0) {
    unread(L, un, "fds", "%s: %s", path, strerror(errno));
    return;
  }
  if (st.st_size <= 0) {
    unread(L, un, "fds", "%s: %s", path, "this kernel does not count open files there (Linux 6.2 does)");
    return;
  }
  lua_pushinteger(L, (lua_Integer)st.st_size);
  lua_setfield(L, out, "fds");
}

/* The file at path (at most CMDLINE_MAX - 1 bytes) in a buffer the caller frees, its length in
 * *n; NULL with errno when it cannot be read. */
static char *read_whole(lua_State *L, const char *path, long *n) {
  char *buf = malloc(CMDLINE_MAX);
  if (!buf) luaL_error(L, "out of memory");
  *n = ss_read_head(path, buf, CMDLINE_MAX);
  if (*n >= 0) return buf;
  int e = errno;
  free(buf);
  errno = e;
  return NULL;
}

/* args: /proc/PID/cmdline split at its NULs. */
static void read_args(lua_State *L, int out, int un, pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
  long n;
  char *buf = read_whole(L, path, &n);
  if (!buf) {
    unread(L, un, "args", "%s: %s", path, strerror(errno));
    return;
  }
  lua_newtable(L);
  int i = 0;
  for (long at = 0; at < n;) {
    size_t len = strlen(buf + at);
    lua_pushlstring(L, buf + at, len);
    lua_rawseti(L, -2, ++i);
    at += (long)len + 1;
  }
  free(buf);
  lua_setfield(L, out, "args");
}

/* core.engine_process(socket_path) -> { pid =, nofile = | nofile_unlimited = true, fds =,
 * args = {...}, unread = { name = "why" } }, or nil, err (kind "host", reason "engine_process")
 * when the socket names no process this one can see. */
static int l_engine_process(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  pid_t pid = peer_pid(path);
  if (pid <= 0)
    return ss_return_error(L, "host", "engine_process", "the process behind %s is not known here (%s)", path,
                           strerror(errno));
  lua_newtable(L);
  int out = lua_gettop(L);
  lua_pushinteger(L, pid);
  lua_setfield(L, out, "pid");
  lua_newtable(L);
  int un = lua_gettop(L);
  read_nofile(L, out, un, pid);
  read_fds(L, out, un, pid);
  read_args(L, out, un, pid);
  lua_setfield(L, out, "unread");
  return 1;
}

/* core.engine_file(pid, path) -> text | nil, err (kind "io"): a small file (its config, at most
 * 64 KiB) as the engine's process sees it, through its root (/proc/PID/root), which is the
 * container's own file system for an engine that runs in one. */
static int l_engine_file(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  const char *file = luaL_checkstring(L, 2);
  if (file[0] != '/') return ss_return_error(L, "invalid", "relative", "not an absolute path: %s", file);
  char path[4096];
  if (snprintf(path, sizeof path, "/proc/%lld/root%s", (long long)pid, file) >= (int)sizeof path)
    return ss_return_error(L, "invalid", "too_long", "path too long: %s", file);
  long n;
  char *buf = read_whole(L, path, &n);
  if (!buf) {
    int e = errno;
    return ss_return_error(L, "io", e == ENOENT ? "not_found" : "failed", "%s: %s", path, strerror(e));
  }
  lua_pushlstring(L, buf, (size_t)n);
  free(buf);
  return 1;
}

void sandstack_open_engine_process(lua_State *L) {
  lua_pushcfunction(L, l_engine_process);
  lua_setfield(L, -2, "engine_process");
  lua_pushcfunction(L, l_engine_file);
  lua_setfield(L, -2, "engine_file");
}
