/* The kernel's limits a session meets on its host, and how much of each is in use, read from
 * files the kernel answers in constant time (never a walk of /proc or of the engine's objects):
 * a start reads them all, however many sessions are alive. A value the kernel does not give (a
 * file missing or unreadable) is left out and named in `unread`, never guessed.
 * The engine's own process (its open-file limit) is csrc/lua/engine_process.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "lua/binding.h"
#include "util/io.h"

#define CGROUP2_MAGIC 0x63677270 /* statfs f_type of a cgroup2 mount (linux/magic.h) */

/* Records why `name` has no value: unread[name] = "<path>: <reason>" (the table at unread_idx). */
static void mark_unread(lua_State *L, int unread_idx, const char *name, const char *path, const char *why) {
  lua_pushfstring(L, "%s: %s", path, why);
  lua_setfield(L, unread_idx, name);
}

/* The file at path into buf; on failure marks name unread with the reason and returns -1. */
static int read_or_mark(lua_State *L, int unread_idx, const char *name, const char *path, char *buf, size_t cap) {
  if (ss_read_head(path, buf, cap) >= 0) return 0;
  mark_unread(L, unread_idx, name, path, strerror(errno));
  return -1;
}

static void set_int(lua_State *L, int idx, const char *name, long long v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, idx, name);
}

/* A sysctl holding one decimal integer (pid_max, threads-max, gc_thresh3, ...). */
static void read_sysctl(lua_State *L, int out, int unread, const char *name, const char *path) {
  char buf[64];
  if (read_or_mark(L, unread, name, path, buf, sizeof buf) != 0) return;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno != 0 || end == buf || v < 0) {
    mark_unread(L, unread, name, path, "not a number");
    return;
  }
  set_int(L, out, name, v);
}

/* The host's tasks (threads of every process): the denominator of /proc/loadavg's 4th field,
 * "running/total", which the kernel keeps as a counter (nr_threads). */
static void read_tasks(lua_State *L, int out, int unread) {
  static const char path[] = "/proc/loadavg";
  char buf[256];
  if (read_or_mark(L, unread, "tasks", path, buf, sizeof buf) != 0) return;
  long long running, total;
  if (sscanf(buf, "%*s %*s %*s %lld/%lld", &running, &total) != 2 || total < 0) {
    mark_unread(L, unread, "tasks", path, "no running/total field");
    return;
  }
  set_int(L, out, "tasks", total);
}

/* The neighbour table's entries: the first column of the first per-CPU row of
 * /proc/net/stat/arp_cache, in hex (every row repeats the table's one counter). */
static void read_neigh_entries(lua_State *L, int out, int unread) {
  static const char path[] = "/proc/net/stat/arp_cache";
  char buf[1024];
  if (read_or_mark(L, unread, "neigh_entries", path, buf, sizeof buf) != 0) return;
  char *row = strchr(buf, '\n'); /* past the header line */
  char *end = NULL;
  long long v = row ? strtoll(row + 1, &end, 16) : -1;
  if (!row || end == row + 1 || v < 0) {
    mark_unread(L, unread, "neigh_entries", path, "no entries column");
    return;
  }
  set_int(L, out, "neigh_entries", v);
}

/* core.host_limits() -> { pid_max =, threads_max =, tasks =, inotify_max_user_instances =,
 * neigh_gc_thresh3 =, neigh_entries =, cgroup2 = bool, unread = { name = "path: why" } }.
 * Never fails: what cannot be read is in unread. */
static int l_host_limits(lua_State *L) {
  lua_newtable(L);
  int out = lua_gettop(L);
  lua_newtable(L);
  int unread = lua_gettop(L);
  read_sysctl(L, out, unread, "pid_max", "/proc/sys/kernel/pid_max");
  read_sysctl(L, out, unread, "threads_max", "/proc/sys/kernel/threads-max");
  read_tasks(L, out, unread);
  read_sysctl(L, out, unread, "inotify_max_user_instances", "/proc/sys/fs/inotify/max_user_instances");
  read_sysctl(L, out, unread, "neigh_gc_thresh3", "/proc/sys/net/ipv4/neigh/default/gc_thresh3");
  read_neigh_entries(L, out, unread);
  struct statfs fs;
  if (statfs("/sys/fs/cgroup", &fs) == 0) {
    lua_pushboolean(L, (unsigned long)fs.f_type == (unsigned long)CGROUP2_MAGIC);
    lua_setfield(L, out, "cgroup2");
  } else {
    mark_unread(L, unread, "cgroup2", "/sys/fs/cgroup", strerror(errno));
  }
  lua_setfield(L, out, "unread");
  return 1;
}

void sandstack_open_host_limits(lua_State *L) {
  lua_pushcfunction(L, l_host_limits);
  lua_setfield(L, -2, "host_limits");
}
