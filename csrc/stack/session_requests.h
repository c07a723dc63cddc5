#ifndef SANDSTACK_STACK_SESSION_REQUESTS_H
#define SANDSTACK_STACK_SESSION_REQUESTS_H
/* The requests of a session's life over time (session_requests.c): pause, hibernate, snapshot,
 * fork, changes and expiry, made for named containers, images and volumes in the keyed form the
 * engine client sends as it is ({method, path, query?, ok?, timeout?, body_json?}). */
#include <cjson/cJSON.h>

/* One request per entry of names (strings) for action, or one request when names is NULL and
 * the action names no object. args: the action's parameters (see the table in
 * session_requests.c). Returns a new array, or NULL when action is unknown or an argument it
 * needs is missing (why: a static text). */
cJSON *ss_session_requests(const char *action, const cJSON *names, const cJSON *args, const char **why);

#endif
