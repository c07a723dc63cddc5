/* The wrapper's script text, its input, and the two small parsers of sbx output. */
#include "sbx/wrapper.h"

#include <stdlib.h>
#include <string.h>

#include "util/base64.h"

/* The wrapper. Everything that may be secret (workspace, mount, cwd, env, argv) arrives on
 * stdin, never on sbx's command line, which every local user reads in /proc/PID/cmdline; stdin is then /dev/null for the command, as before. Each value is a line "x" +
 * base64 (the x keeps an empty value a non-empty line); "--" separates env from argv and "." ends
 * the input, so a cut stream never runs a partial command (exit 126).
 *
 * Stages run as `sh -c "$SANDSTACK_Sn"` so no quoting is nested; the stage variables are unset
 * before the command runs, so its environment is the caller's plus the env entries, exported
 * only in the last stage so that a PATH or IFS among them cannot change how the wrapper itself
 * runs. util-linux unshare/setsid are preferred to a shell's built-in applets (busybox's lack
 * --map-user and -w). Every construct here works in dash, bash and busybox sh
 * (spec/sbx_guest_shell_spec.lua runs it under each). */
const char ss_sbx_wrapper_script[] =
    "n=$1 d=$2 t=$3\n"
    "printf '%s\\n' \"$n\" >&2\n"
    "set --\n"
    "e=\n"
    "while IFS= read -r l; do\n"
    "  case $l in\n"
    "  .) e=1; break ;;\n"
    "  --) set -- \"$@\" -- ;;\n"
    "  x*) v=$(printf %s \"${l#x}\" | base64 -d && printf x) || exit 126\n"
    "    set -- \"$@\" \"${v%x}\" ;;\n"
    "  *) exit 126 ;;\n"
    "  esac\n"
    "done\n"
    "[ -n \"$e\" ] && [ $# -ge 5 ] || exit 126\n"
    "v= l=\n"
    "exec </dev/null\n"
    "SANDSTACK_U=/usr/bin/unshare; [ -x \"$SANDSTACK_U\" ] || SANDSTACK_U=unshare\n"
    "s=/usr/bin/setsid; [ -x \"$s\" ] || s=setsid\n"
    "SANDSTACK_u=$(id -u) SANDSTACK_g=$(id -g)\n"
    "SANDSTACK_S2='echo $$ > \"$1/$2.pgid\" || exit 126; [ ! -e \"$1/$2.cancel\" ] || exit 137; "
    "shift 2; exec \"$SANDSTACK_U\" --user --map-root-user --mount sh -c \"$SANDSTACK_S3\" sandstack-sbx \"$@\"'\n"
    "SANDSTACK_S3='mount --bind \"$1\" \"$2\" || exit 126; shift 2; "
    "exec \"$SANDSTACK_U\" --user --map-user=\"$SANDSTACK_u\" --map-group=\"$SANDSTACK_g\" sh -c \"$SANDSTACK_S4\" sandstack-sbx \"$@\"'\n"
    "SANDSTACK_S4='unset SANDSTACK_S2 SANDSTACK_S3 SANDSTACK_S4 SANDSTACK_U SANDSTACK_u SANDSTACK_g; "
    "cd \"$1\" || exit 125; shift; "
    "while [ $# -gt 0 ]; do case $1 in --) shift; exec \"$@\" ;; esac; export \"$1\" || exit 126; shift; done; "
    "exit 126'\n"
    "export SANDSTACK_S2 SANDSTACK_S3 SANDSTACK_S4 SANDSTACK_U SANDSTACK_u SANDSTACK_g\n"
    "\"$s\" -w sh -c \"$SANDSTACK_S2\" sandstack-sbx \"$d\" \"$t\" \"$@\"\n"
    "r=$?\n"
    "rm -f \"$d/$t.pgid\"\n"
    "exit $r\n";

/* The kill. dash's kill needs `--` before a negative pid and busybox's refuses `--`, so the
 * form is chosen by trying `--` on the script's own pid. A kill(2) that fails (EPERM: the
 * command runs as another user) or a group that outlives the SIGKILL must not look like
 * success: the script then polls /proc for a live (non-zombie) member of the group, a bounded
 * number of times, and exits 0 only when there is none. Exit 3: no cancel file; 4: the pgid
 * file holds no usable group (never 0 or 1: `kill -- -1` is every process); 5: the group is
 * still alive. An empty or missing pgid file means the command never started (the cancel file
 * now stops it) or has ended. */
const char ss_sbx_kill_script[] =
    "d=$1 t=$2\n"
    ": > \"$d/$t.cancel\" || exit 3\n"
    "p=$(cat \"$d/$t.pgid\" 2>/dev/null)\n"
    "[ -n \"$p\" ] || exit 0\n"
    "case $p in *[!0-9]*|0*|1) exit 4 ;; esac\n"
    "if kill -s 0 -- \"$$\" 2>/dev/null; then k=--; else k=; fi\n"
    "kill -s KILL $k \"-$p\" 2>/dev/null\n"
    "r=$? i=0\n"
    "while :; do\n"
    "  a=\n"
    "  for f in /proc/[0-9]*/stat; do\n"
    "    read -r s 2>/dev/null < \"$f\" || continue\n"
    "    s=${s##*) }\n"
    "    set -- $s\n"
    "    [ \"$1\" = Z ] || [ \"$3\" != \"$p\" ] || { a=1; break; }\n"
    "  done\n"
    "  [ -n \"$a\" ] || exit 0\n"
    "  [ \"$r\" -eq 0 ] && [ \"$i\" -lt 50 ] || exit 5\n"
    "  i=$((i + 1))\n"
    "  sleep 0.1 2>/dev/null || sleep 1\n"
    "done\n";


/* Appends "x" + base64(v) + "\n" at *at; 0 when out of memory. */
static int put_x(char **at, ss_bytes v) {
  size_t n;
  char *b = ss_base64(v.p, v.n, &n);
  if (!b) return 0;
  *(*at)++ = 'x';
  memcpy(*at, b, n);
  *at += n;
  *(*at)++ = '\n';
  free(b);
  return 1;
}

static size_t x_len(ss_bytes v) { return 1 + (v.n + 2) / 3 * 4 + 1; }

char *ss_sbx_wrapper_input(const ss_bytes head[3], const ss_bytes *env, size_t nenv, const ss_bytes *argv,
                           size_t nargv, size_t *len) {
  size_t total = sizeof "--\n" - 1 + sizeof ".\n" - 1;
  for (size_t i = 0; i < 3; i++) total += x_len(head[i]);
  for (size_t i = 0; i < nenv; i++) total += x_len(env[i]);
  for (size_t i = 0; i < nargv; i++) total += x_len(argv[i]);
  char *out = malloc(total + 1), *at = out;
  if (!out) return NULL;
  int ok = 1;
  for (size_t i = 0; ok && i < 3; i++) ok = put_x(&at, head[i]);
  for (size_t i = 0; ok && i < nenv; i++) ok = put_x(&at, env[i]);
  memcpy(at, "--\n", 3);
  at += 3;
  for (size_t i = 0; ok && i < nargv; i++) ok = put_x(&at, argv[i]);
  memcpy(at, ".\n", 2);
  at += 2;
  *at = '\0';
  if (!ok) {
    free(out);
    return NULL;
  }
  *len = (size_t)(at - out);
  return out;
}

long ss_sbx_split_stderr(const char *buf, size_t len, const char *nonce, size_t nonce_len) {
  if (nonce_len == 0) return -1;
  size_t pos = 0;
  while (pos < len) {
    const char *nl = memchr(buf + pos, '\n', len - pos);
    size_t line_end = nl ? (size_t)(nl - buf) : len;
    if (nl && line_end - pos == nonce_len && memcmp(buf + pos, nonce, nonce_len) == 0)
      return (long)(line_end + 1);
    if (!nl) break;
    pos = line_end + 1;
  }
  return -1;
}

long ss_sbx_json_start(const char *buf, size_t len) {
  size_t pos = 0;
  while (pos < len) {
    if (buf[pos] == '{') return (long)pos;
    const char *nl = memchr(buf + pos, '\n', len - pos);
    if (!nl) break;
    pos = (size_t)(nl - buf) + 1;
  }
  return -1;
}
