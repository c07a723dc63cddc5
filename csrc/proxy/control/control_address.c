/* Where the control socket is (control.c, control_client.c): a path, or "@name" for the
 * abstract namespace, where the name is the bytes after the '@' behind a leading NUL and the
 * address length says where it ends (abstract names are not NUL-terminated). */
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "proxy/control/control.h"

socklen_t control_address(const char *where, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  size_t n = strlen(where);
  if (n >= sizeof sa->sun_path) n = sizeof sa->sun_path - 1; /* callers refuse longer names first */
  memcpy(sa->sun_path, where, n);
  if (where[0] == '@') {
    sa->sun_path[0] = '\0';
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  }
  return (socklen_t)sizeof *sa;
}
