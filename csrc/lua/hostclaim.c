/* A claim on a host file that several processes race for: an exclusive flock(2) on it, taken
 * without waiting. The kernel drops the lock when its holder dies, so a claimant that crashed
 * leaves the file free for the next one (never a claim held forever), and a file moved away by
 * the winner (claim:move) is one nobody else can claim: a loser that opened it before the move
 * and locks it after sees that the path no longer names what it holds. A warm pool's stacks on
 * this host are claimed this way before the engine's rename (lua/sandstack/docker/pool_store.lua). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lua/binding.h"

#define CLAIM_MT "sandstack.host_claim"
#define CLAIM_PATH_MAX 1024
#define CLAIM_READ_MAX 65536

typedef struct {
  int fd;
  char path[CLAIM_PATH_MAX];
} host_claim;

static int claim_close(lua_State *L) {
  host_claim *c = luaL_checkudata(L, 1, CLAIM_MT);
  if (c->fd >= 0) close(c->fd); /* drops the lock */
  c->fd = -1;
  return 0;
}

static int io_error(lua_State *L, int err, const char *what, const char *path) {
  return ss_return_error(L, "io", err == ENOENT ? "not_found" : "failed", "%s %s: %s", what, path, strerror(err));
}

/* Reads the whole file (at most CLAIM_READ_MAX bytes) from fd's start and pushes it. */
static int push_contents(lua_State *L, int fd) {
  static const size_t cap = CLAIM_READ_MAX;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t total = 0;
  off_t off = 0;
  char chunk[4096];
  for (;;) {
    ssize_t n = pread(fd, chunk, sizeof chunk, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    total += (size_t)n;
    if (total > cap) {
      errno = EFBIG;
      return -1;
    }
    luaL_addlstring(&b, chunk, (size_t)n);
    off += n;
  }
  luaL_pushresult(&b);
  return 0;
}

/* core.claim_file(path) -> claim, contents; or false, "held" (another process holds it) or
 * false, "gone" (no such file, or moved away while we waited for the lock); or nil, err. */
static int l_claim_file(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  if (len >= CLAIM_PATH_MAX) return ss_return_error(L, "invalid", "path_too_long", "claim: path too long: %s", path);
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) {
      lua_pushboolean(L, 0);
      lua_pushliteral(L, "gone");
      return 2;
    }
    return io_error(L, errno, "open", path);
  }
  int r;
  do r = flock(fd, LOCK_EX | LOCK_NB);
  while (r != 0 && errno == EINTR);
  if (r != 0) {
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK) return io_error(L, e, "lock", path);
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "held");
    return 2;
  }
  /* the winner moves the file away while it holds the lock: the path must still name our inode */
  struct stat held, now;
  if (fstat(fd, &held) != 0 || stat(path, &now) != 0 || held.st_ino != now.st_ino || held.st_dev != now.st_dev) {
    close(fd);
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "gone");
    return 2;
  }
  host_claim *c = ss_newuserdata(L, sizeof *c);
  c->fd = fd;
  memcpy(c->path, path, len + 1);
  luaL_getmetatable(L, CLAIM_MT);
  lua_setmetatable(L, -2);
  if (push_contents(L, fd) != 0) {
    int e = errno;
    close(fd);
    c->fd = -1;
    return io_error(L, e, "read", path);
  }
  return 2;
}

/* claim:move(new_path) -> true, or nil, err: renames the claimed file while the lock is held
 * (so no later claimant can take it by its old name), then releases the claim. */
static int l_move(lua_State *L) {
  host_claim *c = luaL_checkudata(L, 1, CLAIM_MT);
  const char *to = luaL_checkstring(L, 2);
  if (c->fd < 0) return ss_return_error(L, "invalid", "released", "claim: already released: %s", c->path);
  if (rename(c->path, to) != 0) {
    int e = errno;
    claim_close(L);
    return io_error(L, e, "rename", c->path);
  }
  claim_close(L);
  lua_pushboolean(L, 1);
  return 1;
}

/* claim:rename(new_path) -> true, or nil, err: renames the claimed file and keeps the lock (the
 * claim now names the new path). The directory is synced before it returns, so the new name
 * survives a crash of the host as a durable write does: a pool's stack answered to a session
 * before the engine's rename is marked this way, and never looks idle again. */
static int l_rename(lua_State *L) {
  host_claim *c = luaL_checkudata(L, 1, CLAIM_MT);
  size_t len;
  const char *to = luaL_checklstring(L, 2, &len);
  if (c->fd < 0) return ss_return_error(L, "invalid", "released", "claim: already released: %s", c->path);
  if (len >= CLAIM_PATH_MAX) return ss_return_error(L, "invalid", "path_too_long", "claim: path too long: %s", to);
  if (rename(c->path, to) != 0) return io_error(L, errno, "rename", c->path);
  memcpy(c->path, to, len + 1);
  char dir[CLAIM_PATH_MAX];
  memcpy(dir, to, len + 1);
  char *slash = strrchr(dir, '/');
  if (slash == dir) slash[1] = '\0';
  else if (slash) *slash = '\0';
  else strcpy(dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error(L, errno, "open", dir);
  int r = fsync(dfd);
  int e = errno;
  close(dfd);
  if (r != 0) return io_error(L, e, "fsync", dir);
  lua_pushboolean(L, 1);
  return 1;
}

/* claim:release(): lets the next claimant take the file as it is. Idempotent. */
static int l_release(lua_State *L) {
  claim_close(L);
  return 0;
}

void sandstack_open_hostclaim(lua_State *L) {
  static const luaL_Reg methods[] = {{"move", l_move}, {"rename", l_rename}, {"release", l_release}, {NULL, NULL}};
  ss_define_class(L, CLAIM_MT, methods, claim_close);
  static const luaL_Reg fns[] = {{"claim_file", l_claim_file}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
