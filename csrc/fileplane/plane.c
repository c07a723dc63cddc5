/* Opening and closing a plane: options checked, the anchor opened once with O_PATH. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/internal.h"
#include "util/random.h"

/* guest_root normalized into p: absolute, no "." or "..", not "/" itself. */
static int set_guest_root(fp_plane *p, const char *gr, ss_error *e) {
  if (!gr || gr[0] != '/') {
    fp_err_invalid(e, "guest_root", gr, "guest_root must be an absolute path");
    return -1;
  }
  size_t n = 0, len = strlen(gr);
  for (size_t i = 0; i < len;) {
    while (i < len && gr[i] == '/') i++;
    size_t start = i;
    while (i < len && gr[i] != '/') i++;
    size_t c = i - start;
    if (c == 0 || (c == 1 && gr[start] == '.')) continue;
    if ((c == 2 && gr[start] == '.' && gr[start + 1] == '.') || c > FP_NAME_MAX || n + c + 2 >= sizeof p->guest_root) {
      fp_err_invalid(e, "guest_root", gr, "guest_root '%s' must be a plain absolute path", gr);
      return -1;
    }
    p->guest_root[n++] = '/';
    memcpy(p->guest_root + n, gr + start, c);
    n += c;
  }
  if (n == 0) {
    fp_err_invalid(e, "guest_root", gr, "guest_root must not be /");
    return -1;
  }
  p->guest_root[n] = '\0';
  p->guest_root_len = n;
  return 0;
}

fp_plane *fp_open(const fp_options *o, ss_error *e) {
  if (!o->root || !o->root[0]) {
    fp_err_invalid(e, "root", NULL, "root is required");
    return NULL;
  }
  fp_plane *p = calloc(1, sizeof *p);
  if (!p) {
    fp_err_io(e, ENOMEM, "cannot allocate a plane for", o->root);
    return NULL;
  }
  p->rootfd = -1;
  p->openat2_state = -1;
  p->resolve = o->resolve;
  p->allow_hardlinks = o->allow_hardlinks;
  p->sync = o->sync;
  p->max_read = o->max_read;
  if (set_guest_root(p, o->guest_root ? o->guest_root : "/sandstack", e) != 0) goto fail;
  /* cwd resolves like any guest path, from guest_root itself. */
  const char *cwd = o->cwd;
  char def[FP_PATH_MAX];
  if (!cwd) {
    memcpy(def, p->guest_root, p->guest_root_len);
    memcpy(def + p->guest_root_len, "/work", 6);
    cwd = def;
  }
  if (cwd[0] != '/') {
    fp_err_invalid(e, "cwd", cwd, "cwd must be an absolute guest path");
    goto fail;
  }
  if (fp_normalize(p, NULL, cwd, strlen(cwd), &p->cwd, e) != 0) goto fail;
  /* The host path is the host's own configuration: links in it are followed, once, here. */
  p->rootfd = open(o->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (p->rootfd < 0) {
    fp_err_io(e, errno, "cannot open root", o->root);
    goto fail;
  }
  struct stat st;
  if (fstat(p->rootfd, &st) != 0) {
    fp_err_io(e, errno, "cannot stat root", o->root);
    goto fail;
  }
  p->root_dev = st.st_dev;
  p->euid = geteuid();
  p->egid = getegid();
  if (ss_random_hex(p->tmp_prefix, 8) != 0) {
    fp_err_io(e, errno, "getrandom failed for", o->root);
    goto fail;
  }
  return p;
fail:
  fp_close(p);
  return NULL;
}

void fp_close(fp_plane *p) {
  if (!p) return;
  if (p->rootfd >= 0) close(p->rootfd);
  free(p);
}
