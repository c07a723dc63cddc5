#include "engine/cause.h"

#include <string.h>

/* Each cause, with the texts that say it (Docker 20.10 to 28, Podman): all of `all` appear in
 * the message, and one of `any` when it has any. First match wins, so the narrower come first. */
static const struct {
  const char *cause;
  const char *all[2];
  const char *any[4];
} CAUSES[] = {
    {"checkpoint_exists", {"checkpoint", "already exists"}, {NULL}},
    {"criu_missing", {"criu", NULL}, {"not found", "executable file", "not installed", "no such file"}},
    {"already_paused", {"already paused", NULL}, {NULL}},
    {"not_paused", {"not paused", NULL}, {NULL}},
    {"not_running", {"not running", NULL}, {NULL}},
    {"already_running", {"already running", NULL}, {NULL}},
    {"port_taken", {NULL}, {"address already in use", "port is already allocated"}},
    {"no_subnet", {NULL}, {"non-overlapping IPv4 address pool", "fully subnetted"}},
    {"subnet_overlap", {"overlap", NULL}, {NULL}},
    {"in_use_by_task", {"in use by task", NULL}, {NULL}},
    {"out_of_sequence", {"out of sequence", NULL}, {NULL}},
    {"checkpoint", {"checkpoint", NULL}, {NULL}}, /* any other failure of a checkpoint or restore */
};

const char *sse_engine_cause(const char *message) {
  if (!message) return NULL;
  for (size_t i = 0; i < sizeof CAUSES / sizeof CAUSES[0]; i++) {
    int ok = 1;
    for (size_t k = 0; k < 2 && CAUSES[i].all[k] && ok; k++) ok = strstr(message, CAUSES[i].all[k]) != NULL;
    if (ok && CAUSES[i].any[0]) {
      int one = 0;
      for (size_t k = 0; k < 4 && CAUSES[i].any[k] && !one; k++) one = strstr(message, CAUSES[i].any[k]) != NULL;
      ok = one;
    }
    if (ok) return CAUSES[i].cause;
  }
  return NULL;
}
