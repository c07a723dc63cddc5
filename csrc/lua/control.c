/* The host's side of a proxy's control socket when the socket is a file the host can reach (the
 * stack's control directory, bind-mounted into the proxy's container alone): one connection, one
 * request up to a half-close, one answer up to the proxy's close, all under one deadline. The
 * directory itself is made here too, because it must belong to the proxy's uid, which only a
 * chown can give it. Without either, sandstack.docker reaches the socket by an Engine exec. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lua/binding.h"

#define ANSWER_MAX (4u << 20) /* the proxy's answers are small; a rendered policy is at most 1 MiB */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits until fd is ready for `events` or the deadline passes: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - now_s();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)(left * 1000) + 1);
    if (r > 0) return 1;
    if (r == 0) continue; /* the loop re-reads the clock */
    if (errno != EINTR) return -1;
  }
}

static int fail(lua_State *L, int fd, const char *reason, const char *path, const char *what, int err) {
  if (fd >= 0) close(fd);
  return ss_return_error(L, "proxy", reason, "the proxy's control socket %s: %s%s%s", path, what, err ? ": " : "",
                         err ? strerror(err) : "");
}

/* core.control_request(path, request, timeout_s) -> answer, or nil, err (kind "proxy", reason
 * "unreachable" when nothing listens there, "timeout", or "no_answer"). */
static int l_control_request(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t len;
  const char *req = luaL_checklstring(L, 2, &len);
  double deadline = now_s() + luaL_optnumber(L, 3, 10);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path) return fail(L, -1, "unreachable", path, "the path is too long", 0);
  memcpy(sa.sun_path, path, strlen(path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return fail(L, fd, "unreachable", path, "socket", errno);
  /* a local stream connect completes at once or fails: EAGAIN is a full backlog, tried again */
  while (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return fail(L, fd, "unreachable", path, "cannot connect", errno);
    if (now_s() >= deadline) return fail(L, fd, "timeout", path, "the backlog stayed full", 0);
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) return fail(L, fd, "no_answer", path, "cannot send", errno);
    int r = wait_fd(fd, POLLOUT, deadline);
    if (r <= 0) return fail(L, fd, r == 0 ? "timeout" : "no_answer", path, "sending the request", r ? errno : 0);
  }
  shutdown(fd, SHUT_WR); /* the end of the request */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t got = 0;
  for (;;) {
    char chunk[16384];
    ssize_t r = recv(fd, chunk, sizeof chunk, 0);
    if (r > 0) {
      if ((got += (size_t)r) > ANSWER_MAX) return fail(L, fd, "no_answer", path, "the answer is too large", 0);
      luaL_addlstring(&b, chunk, (size_t)r);
      continue;
    }
    if (r == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return fail(L, fd, "no_answer", path, "reading the answer", errno);
    int w = wait_fd(fd, POLLIN, deadline);
    if (w <= 0) return fail(L, fd, w == 0 ? "timeout" : "no_answer", path, "waiting for the answer", w ? errno : 0);
  }
  close(fd);
  if (got == 0) return fail(L, -1, "no_answer", path, "closed without an answer", 0);
  luaL_pushresult(&b);
  return 1;
}

/* core.control_dir(dir, uid, gid) -> true, or nil, err (kind "io"): makes dir (mode 0700, the
 * caller's) and dir/control (mode 0700, owned by uid:gid, the proxy's own). dir must not exist:
 * a directory someone else prepared could be watched or swapped. Its parent is made 0700 when
 * absent. On failure nothing made here is left. */
static int l_control_dir(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  lua_Integer uid = luaL_checkinteger(L, 2), gid = luaL_checkinteger(L, 3);
  size_t n = strlen(dir);
  char parent[4096], inner[4096];
  if (n == 0 || n + sizeof "/control" > sizeof inner || dir[0] != '/')
    return ss_return_error(L, "io", "failed", "control directory %s: not an absolute path", dir);
  memcpy(parent, dir, n + 1);
  char *slash = strrchr(parent, '/');
  if (slash != parent) {
    *slash = '\0';
    if (mkdir(parent, 0700) != 0 && errno != EEXIST)
      return ss_return_error(L, "io", "failed", "cannot make %s: %s", parent, strerror(errno));
  }
  if (mkdir(dir, 0700) != 0) {
    int e = errno;
    return ss_return_error(L, "io", e == EEXIST ? "exists" : "failed", "cannot make %s: %s", dir, strerror(e));
  }
  snprintf(inner, sizeof inner, "%s/control", dir);
  int ok = mkdir(inner, 0700) == 0;
  int e = errno;
  if (ok && chown(inner, (uid_t)uid, (gid_t)gid) != 0) {
    e = errno;
    rmdir(inner);
    ok = 0;
  }
  if (!ok) {
    rmdir(dir);
    return ss_return_error(L, "io", "failed", "cannot make %s for uid %lld: %s", inner, (long long)uid, strerror(e));
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* core.control_is_socket(path) -> whether path is a unix socket now (lstat: a link is not). */
static int l_control_is_socket(lua_State *L) {
  struct stat st;
  lua_pushboolean(L, lstat(luaL_checkstring(L, 1), &st) == 0 && S_ISSOCK(st.st_mode));
  return 1;
}

/* core.euid() -> this process's effective uid (a bind mount's directory needs root's chown). */
static int l_euid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)geteuid());
  return 1;
}

void sandstack_open_control(lua_State *L) {
  static const luaL_Reg fns[] = {{"control_request", l_control_request}, {"control_dir", l_control_dir},
                                 {"control_is_socket", l_control_is_socket}, {"euid", l_euid}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
