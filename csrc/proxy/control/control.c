/* The control socket: how the host changes a running proxy's policy. It is a unix
 * socket on no TCP port and on no volume, so nothing in the sandbox (another container, another
 * network namespace, another mount namespace) can name it. SANDSTACK_CONTROL_SOCKET names it:
 * "@name" (the image's default, @sandstack-control) is the abstract namespace, which belongs to
 * the proxy container's own network namespace and leaves no file in its filesystem; a path is
 * a socket file 0600 in a directory of mode 0700 of the proxy's uid. sandstack.docker mounts
 * that directory from the host (the stack's control directory, into this container alone) when
 * it can, and connects to the socket from the host; else it reaches the socket by an Engine exec
 * of `sandstack-proxy --control VERB` inside the proxy's container (control_client.c). A peer
 * must run as the proxy's own uid or, for a path, as SANDSTACK_CONTROL_PEER_UID (SO_PEERCRED).
 *
 * One request per connection, read up to EOF, then one JSON line back and the close; what a
 * request may say and how it is answered is control_request.c's. The listening handle is
 * unreferenced: it never keeps the loop (and so a drained proxy) alive. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxy/route/ask.h"
#include "proxy/audit.h"
#include "proxy/conn.h"
#include "proxy/control/control.h"
#include "proxy/control/control_request.h"
#include "proxy/parse/cred_table.h"
#include "proxy/control/live_policy.h"
#include "proxy/server.h"
#include "proxy/tls/tls.h"
#include "util/buf.h"

#define CONTROL_MAX_REQUEST (8u << 20) /* a policy is at most 1 MiB rendered; room for escaping */
#define CONTROL_DEADLINE_MS 10000

struct control_server {
  uv_pipe_t listener;
  proxy_server *srv;
  char path[108];
  long host_uid; /* SANDSTACK_CONTROL_PEER_UID: the host's uid, let in beside ours; -1 for none */
};

typedef struct control_peer {
  uv_pipe_t pipe;
  uv_timer_t timer;
  uv_write_t write;
  proxy_server *srv;
  long host_uid;
  ss_buf in; /* the request, at most CONTROL_MAX_REQUEST + 1 (one byte more is too large) */
  char *answer;
  int open_handles, answered;
} control_peer;

static void peer_freed(uv_handle_t *h) {
  control_peer *p = h->data;
  if (--p->open_handles) return;
  ss_buf_wipe(&p->in); /* set-credentials carries secrets */
  free(p->answer);
  free(p);
}

static void peer_close(control_peer *p) {
  if (uv_is_closing((uv_handle_t *)&p->pipe)) return;
  uv_close((uv_handle_t *)&p->pipe, peer_freed);
  uv_close((uv_handle_t *)&p->timer, peer_freed);
}

static void on_answer_written(uv_write_t *w, int status) {
  (void)status;
  peer_close(w->data);
}

static void answer(control_peer *p, cJSON *o) {
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  size_t n = line ? strlen(line) : 0;
  p->answer = line ? realloc(line, n + 2) : NULL;
  if (!p->answer) {
    free(line);
    return peer_close(p);
  }
  p->answer[n] = '\n';
  p->answered = 1;
  uv_buf_t b = uv_buf_init(p->answer, (unsigned)(n + 1));
  p->write.data = p;
  if (uv_write(&p->write, (uv_stream_t *)&p->pipe, &b, 1, on_answer_written) != 0) peer_close(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  control_peer *p = h->data;
  (void)suggested;
  size_t room = ss_buf_room(&p->in), want = room < 65536 ? room : 65536;
  if (want == 0 || ss_buf_reserve(&p->in, want) != SS_BUF_OK) {
    *b = uv_buf_init(NULL, 0);
    return;
  }
  *b = uv_buf_init(p->in.data + p->in.len, (unsigned)want);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  control_peer *p = st->data;
  (void)b;
  if (p->answered) return;
  if (n > 0) {
    p->in.len += (size_t)n;
    p->in.data[p->in.len] = '\0';
    if (p->in.len > CONTROL_MAX_REQUEST) {
      uv_read_stop(st);
      return answer(p, control_refusal("too_large", "the request is larger than the control socket accepts"));
    }
    return;
  }
  if (n == UV_EOF) {
    uv_read_stop(st);
    return answer(p, control_request_answer(p->srv, p->in.data, p->in.len));
  }
  if (n < 0) peer_close(p); /* UV_ENOBUFS too: the request outgrew its buffer */
}

static void on_peer_deadline(uv_timer_t *t) { peer_close(t->data); }

/* Only the proxy's own uid may speak (an exec in its container runs as it), and the host's uid
 * when the socket is a file in the stack's control directory, which only the proxy's container
 * has mounted: the host's module connects from outside. */
static int peer_is_us(uv_pipe_t *pipe, long host_uid) {
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (uv_fileno((uv_handle_t *)pipe, &fd) != 0) return 0;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.uid == geteuid() || (host_uid >= 0 && cred.uid == (uid_t)host_uid);
}

static void on_control_connection(uv_stream_t *l, int status) {
  control_server *cs = l->data;
  if (status < 0) return;
  control_peer *p = calloc(1, sizeof *p);
  if (!p) return;
  p->srv = cs->srv;
  p->host_uid = cs->host_uid;
  ss_buf_init(&p->in, CONTROL_MAX_REQUEST + 1);
  uv_pipe_init(l->loop, &p->pipe, 0);
  uv_timer_init(l->loop, &p->timer);
  p->pipe.data = p->timer.data = p;
  p->open_handles = 2;
  if (uv_accept(l, (uv_stream_t *)&p->pipe) != 0 || !peer_is_us(&p->pipe, p->host_uid)) return peer_close(p);
  uv_timer_start(&p->timer, on_peer_deadline, CONTROL_DEADLINE_MS, 0);
  uv_read_start((uv_stream_t *)&p->pipe, on_alloc, on_read);
}

/* The socket's directory: made 0700 here, or one that exists already only when it is ours and
 * closed to everyone else (a directory someone else prepared could be watched or swapped). */
static int prepare_dir(const char *path, char *why, size_t n) {
  char dir[108];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) {
    snprintf(why, n, "SANDSTACK_CONTROL_SOCKET must be an absolute path inside a directory of its own");
    return -1;
  }
  *slash = '\0';
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, n, "cannot make %s: %s", dir, strerror(errno));
    return -1;
  }
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
    snprintf(why, n, "%s must be a directory of this user with mode 0700", dir);
    return -1;
  }
  /* a socket left by an earlier run of this proxy (the directory is ours alone) */
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
  return 0;
}

static void control_freed(uv_handle_t *h) { free(h->data); }

/* "@name": a socket in the abstract namespace (no file at all), bound here because libuv 1.44's
 * uv_pipe_bind takes only paths; libuv then listens on the bound descriptor. */
static int bind_abstract(uv_pipe_t *listener, const char *name) {
  struct sockaddr_un sa;
  socklen_t len = control_address(name, &sa);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return uv_translate_sys_error(errno);
  if (bind(fd, (struct sockaddr *)&sa, len) != 0) {
    int e = errno;
    close(fd);
    return uv_translate_sys_error(e);
  }
  int rc = uv_pipe_open(listener, fd);
  if (rc != 0) close(fd);
  return rc;
}

int control_start(proxy_server *s, const char *path, char *why, size_t n) {
  if (strlen(path) >= sizeof ((control_server *)0)->path) {
    snprintf(why, n, "SANDSTACK_CONTROL_SOCKET is longer than a unix socket path may be");
    return -1;
  }
  int abstract = path[0] == '@';
  if (!abstract && prepare_dir(path, why, n) != 0) return -1;
  control_server *cs = calloc(1, sizeof *cs);
  if (!cs) {
    snprintf(why, n, "out of memory");
    return -1;
  }
  cs->srv = s;
  snprintf(cs->path, sizeof cs->path, "%s", path);
  const char *host_uid = abstract ? NULL : getenv("SANDSTACK_CONTROL_PEER_UID");
  char *end = NULL;
  cs->host_uid = host_uid && *host_uid ? strtol(host_uid, &end, 10) : -1;
  if (end && (*end || cs->host_uid < 0)) cs->host_uid = -1; /* unreadable: nobody but us */
  uv_pipe_init(s->loop, &cs->listener, 0);
  cs->listener.data = cs;
  mode_t was = umask(077); /* the socket is born 0600: no moment where another user could connect */
  int rc = abstract ? bind_abstract(&cs->listener, path) : uv_pipe_bind(&cs->listener, path);
  umask(was);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&cs->listener, 16, on_control_connection);
  if (rc != 0) {
    snprintf(why, n, "cannot listen on %s: %s", path, uv_strerror(rc));
    uv_close((uv_handle_t *)&cs->listener, control_freed);
    return -1;
  }
  if (!abstract) chmod(path, 0600);
  uv_unref((uv_handle_t *)&cs->listener);
  s->control = cs;
  return 0;
}

void control_stop(proxy_server *s) {
  control_server *cs = s->control;
  if (!cs) return;
  s->control = NULL;
  if (cs->path[0] != '@') unlink(cs->path);
  uv_close((uv_handle_t *)&cs->listener, control_freed);
}
