/* Error objects of the capture: a malformed archive, or an OS failure named after errno.
 * The archive is the engine's answer (GET /containers/{id}/archive), so a malformed one is
 * kind "engine", reason "bad_archive", as an answer that is not JSON is "engine"/"bad_json":
 * not "invalid", which names a caller's mistake. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "capture/internal.h"

void cap_err_archive(ss_error *e, uint64_t offset, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ss_error_set(e, "engine", "bad_archive", "the capture archive is malformed at byte %llu: %s",
               (unsigned long long)offset, msg);
  ss_error_field_num(e, "offset", (double)offset);
}

void cap_err_io(ss_error *e, int err, const char *what, const char *name) {
  const char *ename = strerrorname_np(err);
  ss_error_set(e, "io", ename ? ename : "EIO", "%s '%.200s': %s", what, name ? name : "", strerror(err));
  ss_error_field_num(e, "errno", err);
  if (name) ss_error_field_str(e, "path", name);
}
