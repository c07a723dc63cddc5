/* `sandstack-proxy --control VERB`: the host's side of the control socket (control.c), run by an
 * Engine exec inside the proxy's container. The payload comes in SANDSTACK_CONTROL_PAYLOAD (an
 * exec takes an environment but no stdin here), the socket's path in SANDSTACK_CONTROL_SOCKET
 * (the image sets it). It sends one request, prints the one-line JSON answer and exits 0 when the
 * answer says "ok": true, 1 when the proxy refused, 2 when the proxy could not be asked. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxy/control/control.h"
#include "util/io.h"

#define ANSWER_MAX (4u << 20)

static int cannot(const char *verb, const char *what) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", 0);
  cJSON_AddStringToObject(o, "error", "unreachable");
  char msg[600];
  snprintf(msg, sizeof msg, "sandstack-proxy --control %s: %s", verb, what);
  cJSON_AddStringToObject(o, "message", msg);
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  printf("%s\n", line ? line : "{\"ok\":false}");
  free(line);
  return 2;
}

int control_client(const char *verb) {
  const char *path = getenv("SANDSTACK_CONTROL_SOCKET"), *payload = getenv("SANDSTACK_CONTROL_PAYLOAD");
  if (!path || !*path) return cannot(verb, "SANDSTACK_CONTROL_SOCKET is not set (this proxy has no control socket)");
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof sa.sun_path) return cannot(verb, "SANDSTACK_CONTROL_SOCKET is too long");
  socklen_t sa_len = control_address(path, &sa);
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "verb", verb);
  if (payload) cJSON_AddStringToObject(req, "payload", payload);
  char *text = cJSON_PrintUnformatted(req);
  cJSON_Delete(req);
  if (!text) return cannot(verb, "out of memory");
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sa_len);
  if (rc != 0 && fd >= 0 && path[0] != '@') {
    /* the proxy could not use its directory and listens where the image says (main.c) */
    int first = errno;
    struct sockaddr_un fb;
    socklen_t fb_len = control_address(CONTROL_FALLBACK, &fb);
    rc = connect(fd, (struct sockaddr *)&fb, fb_len);
    if (rc != 0) errno = first;
  }
  if (rc != 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "cannot connect to %s: %s", path, strerror(errno));
    free(text);
    if (fd >= 0) close(fd);
    return cannot(verb, msg);
  }
  int sent = ss_write_all(fd, text, strlen(text));
  free(text);
  shutdown(fd, SHUT_WR); /* the end of the request */
  char *answer = malloc(ANSWER_MAX + 1);
  size_t len = 0;
  while (sent == 0 && answer && len < ANSWER_MAX) {
    ssize_t r = read(fd, answer + len, ANSWER_MAX - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (sent != 0 || !answer || len == 0) {
    free(answer);
    return cannot(verb, "the proxy closed the control socket without an answer");
  }
  answer[len] = '\0';
  cJSON *o = cJSON_ParseWithLength(answer, len);
  int ok = o && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"));
  cJSON_Delete(o);
  fputs(answer, stdout);
  if (answer[len - 1] != '\n') fputc('\n', stdout);
  free(answer);
  return ok ? 0 : 1;
}
