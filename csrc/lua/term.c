/* The host terminal of `sandstack shell` (lua/sandstack/cli/shell.lua): raw mode, its size,
 * SIGWINCH as a descriptor, and unbuffered reads and writes with poll(2):
 *   core.term_raw(fd) -> saved | nil, err     core.term_restore(fd, saved) -> true | nil, err
 *   core.term_size(fd) -> cols, rows | nil    (not a terminal)
 *   core.term_winch() -> w: w:fd(), w:take() -> true when a SIGWINCH came, w:close()
 *   core.fd_poll({fd, ...}, timeout) -> {[fd] = true, ...}   (readable or hung up)
 *   core.fd_read(fd[, max]) -> bytes | "" at the end | nil, err
 *   core.fd_write(fd, bytes) -> true | nil, err
 * SIGWINCH is taken through a signalfd with the signal blocked: no handler and no global flag.
 * The CLI is single-threaded, so blocking it for the process is blocking it for the thread. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "lua/binding.h"

#define WINCH_MT "sandstack.term_winch"

static int errno_error(lua_State *L, const char *what) {
  int e = errno;
  const char *name = strerrorname_np(e);
  return ss_return_error(L, "io", name ? name : "EIO", "%s: %s", what, strerror(e));
}

static int l_term_raw(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  struct termios t;
  if (tcgetattr(fd, &t) != 0) return errno_error(L, "tcgetattr");
  lua_pushlstring(L, (const char *)&t, sizeof t);
  struct termios raw = t;
  cfmakeraw(&raw);
  if (tcsetattr(fd, TCSANOW, &raw) != 0) return errno_error(L, "tcsetattr");
  return 1;
}

static int l_term_restore(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  size_t n;
  const char *saved = luaL_checklstring(L, 2, &n);
  luaL_argcheck(L, n == sizeof(struct termios), 2, "a value term_raw returned");
  struct termios t;
  memcpy(&t, saved, sizeof t);
  if (tcsetattr(fd, TCSANOW, &t) != 0) return errno_error(L, "tcsetattr");
  lua_pushboolean(L, 1);
  return 1;
}

static int l_term_size(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  struct winsize w;
  if (ioctl(fd, TIOCGWINSZ, &w) != 0 || w.ws_col == 0 || w.ws_row == 0) return 0;
  lua_pushinteger(L, w.ws_col);
  lua_pushinteger(L, w.ws_row);
  return 2;
}

typedef struct {
  int fd;          /* -1 once closed */
  sigset_t before; /* the mask to put back */
} winch;

static int w_close(lua_State *L) {
  winch *w = luaL_checkudata(L, 1, WINCH_MT);
  if (w->fd >= 0) {
    close(w->fd);
    sigprocmask(SIG_SETMASK, &w->before, NULL);
  }
  w->fd = -1;
  return 0;
}

static int w_fd(lua_State *L) {
  lua_pushinteger(L, ((winch *)luaL_checkudata(L, 1, WINCH_MT))->fd);
  return 1;
}

/* Drains what came; true when at least one SIGWINCH did. */
static int w_take(lua_State *L) {
  winch *w = luaL_checkudata(L, 1, WINCH_MT);
  int any = 0;
  struct signalfd_siginfo si;
  while (w->fd >= 0 && read(w->fd, &si, sizeof si) == (ssize_t)sizeof si) any = 1;
  lua_pushboolean(L, any);
  return 1;
}

static int l_term_winch(lua_State *L) {
  winch *w = ss_newuserdata(L, sizeof *w);
  w->fd = -1;
  luaL_getmetatable(L, WINCH_MT);
  lua_setmetatable(L, -2);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGWINCH);
  if (sigprocmask(SIG_BLOCK, &set, &w->before) != 0) return errno_error(L, "sigprocmask");
  w->fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (w->fd < 0) {
    int e = errno;
    sigprocmask(SIG_SETMASK, &w->before, NULL);
    errno = e;
    return errno_error(L, "signalfd");
  }
  return 1;
}

#define MAX_POLL 8

static int l_fd_poll(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  double timeout = luaL_optnumber(L, 2, -1);
  struct pollfd p[MAX_POLL];
  int n = 0;
  for (int i = 1; n < MAX_POLL; i++) {
    lua_rawgeti(L, 1, i);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      break;
    }
    p[n].fd = (int)luaL_checkinteger(L, -1);
    p[n].events = POLLIN;
    p[n].revents = 0;
    n++;
    lua_pop(L, 1);
  }
  int ms = timeout < 0 ? -1 : (int)(timeout * 1000.0);
  int rc;
  do rc = poll(p, (nfds_t)n, ms);
  while (rc < 0 && errno == EINTR);
  if (rc < 0) return errno_error(L, "poll");
  lua_newtable(L);
  for (int i = 0; i < n; i++) {
    if (!p[i].revents) continue;
    lua_pushboolean(L, 1);
    lua_rawseti(L, -2, p[i].fd);
  }
  return 1;
}

static int l_fd_read(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, 65536);
  luaL_argcheck(L, max > 0 && max <= 1 << 20, 2, "between 1 and 1 MiB");
  char *buf = malloc((size_t)max);
  if (!buf) return ss_return_error(L, "io", "ENOMEM", "out of memory");
  ssize_t got;
  do got = read(fd, buf, (size_t)max);
  while (got < 0 && errno == EINTR);
  if (got < 0) {
    free(buf);
    if (errno == EIO) { /* a terminal whose other side is gone reads as its end */
      lua_pushliteral(L, "");
      return 1;
    }
    return errno_error(L, "read");
  }
  lua_pushlstring(L, buf, (size_t)got);
  free(buf);
  return 1;
}

static int l_fd_write(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      poll(&pf, 1, 1000);
      continue;
    }
    if (w <= 0) return errno_error(L, "write");
    p += w;
    n -= (size_t)w;
  }
  lua_pushboolean(L, 1);
  return 1;
}

void sandstack_open_term(lua_State *L) {
  static const luaL_Reg wm[] = {{"fd", w_fd}, {"take", w_take}, {"close", w_close}, {NULL, NULL}};
  ss_define_class(L, WINCH_MT, wm, w_close);
  static const luaL_Reg fns[] = {{"term_raw", l_term_raw},   {"term_restore", l_term_restore},
                                 {"term_size", l_term_size}, {"term_winch", l_term_winch},
                                 {"fd_poll", l_fd_poll},     {"fd_read", l_fd_read},
                                 {"fd_write", l_fd_write},   {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
