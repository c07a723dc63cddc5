/* Test-only Lua module sandstack_test.sigchld (built into <build dir>/sandstack_test/, never installed).
 * It lets spec/sbx_unit_spec.lua look at and change the process's SIGCHLD disposition, to show
 * that the subprocess runner installs no handler and still gets its own child's exit status when
 * the host (nginx) reaps every child with waitpid(-1, WNOHANG) from a handler.
 *
 * The counter below is global mutable state on purpose: a signal handler can only reach static
 * storage, and the disposition it serves is process-wide anyway. That is why this lives here and
 * not in sandstack/core.so, which worker-thread VMs load concurrently. */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

static volatile sig_atomic_t reaped;

/* What nginx's SIGCHLD handler does: reap every exited child, whoever started it. */
static void reaper(int sig) {
  (void)sig;
  int saved = errno; /* the interrupted code may be about to read errno */
  int st;
  while (waitpid(-1, &st, WNOHANG) > 0) reaped = reaped + 1;
  errno = saved;
}

/* sigchld.install_reaper() -> true: installs the reaping handler for the rest of the process. */
static int l_install_reaper(lua_State *L) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = reaper;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGCHLD, &sa, NULL) != 0) return luaL_error(L, "sigaction: %s", strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

/* sigchld.reaped() -> how many children the handler has reaped so far. */
static int l_reaped(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)reaped);
  return 1;
}

/* sigchld.disposition() -> "default", "ignore" or "handler". */
static int l_disposition(lua_State *L) {
  struct sigaction sa;
  if (sigaction(SIGCHLD, NULL, &sa) != 0) return luaL_error(L, "sigaction: %s", strerror(errno));
  lua_pushstring(L, sa.sa_handler == SIG_DFL ? "default" : sa.sa_handler == SIG_IGN ? "ignore" : "handler");
  return 1;
}

int luaopen_sandstack_test_sigchld(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"install_reaper", l_install_reaper}, {"reaped", l_reaped}, {"disposition", l_disposition}, {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, fns, 0); /* LuaJIT 2.1 has it too */
  return 1;
}
