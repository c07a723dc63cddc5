#ifndef SANDSTACK_SBX_WRAPPER_H
#define SANDSTACK_SBX_WRAPPER_H
/* The exec wrapper that every command runs through, and the parsers for what sbx prints. */
#include <stddef.h>

/* sh script run as `sbx exec -i NAME sh -c WRAPPER sandstack-sbx NONCE DIR TOKEN`, with stdin
 * the lines xWS, xMNT, xCWD, xNAME=VALUE..., "--", xARG..., "." (each x-value is "x" + base64;
 * nothing secret on any command line). It prints NONCE on stderr, decodes its input (exit 126
 * when it is cut or malformed), starts a new session, records its process group in
 * DIR/TOKEN.pgid, refuses to start when DIR/TOKEN.cancel exists, then binds WS at MNT in a
 * user+mount namespace of its own and runs the command in CWD (exit 125 when CWD is missing) as
 * the caller's uid and gid, with the env entries exported and stdin /dev/null. */
extern const char ss_sbx_wrapper_script[];
/* `sh -c KILL sandstack-sbx DIR TOKEN`: leaves the cancel file, kills the recorded group, and
 * exits 0 only when no member of it is left alive (non-zero: the caller retires the sandbox). */
extern const char ss_sbx_kill_script[];


/* A byte string that may hold NUL (an argument, an env entry). */
typedef struct ss_bytes {
  const char *p;
  size_t n;
} ss_bytes;

/* The wrapper's stdin, as the script above reads it: the x-values of ws, mnt and cwd (head),
 * of each env entry ("K=V"), "--", the x-values of argv, then "."; one a line. malloc'd (the
 * caller frees it), its length in *len; NULL when out of memory. */
char *ss_sbx_wrapper_input(const ss_bytes head[3], const ss_bytes *env, size_t nenv, const ss_bytes *argv,
                           size_t nargv, size_t *len);

/* Finds the wrapper's nonce line in stderr: the first line that is exactly NONCE. Returns the
 * offset of the byte after its newline (where the command's own stderr starts), or -1 when the
 * wrapper never printed it (sbx failed before the command started). */
long ss_sbx_split_stderr(const char *buf, size_t len, const char *nonce, size_t nonce_len);

/* sbx may print daemon start-up lines before JSON: offset of the first line starting with '{',
 * or -1. */
long ss_sbx_json_start(const char *buf, size_t len);

#endif
