#ifndef SANDSTACK_PROBE_ERROR_H
#define SANDSTACK_PROBE_ERROR_H
/* Turns how a probe ended (curl's code, the callbacks' reason to stop) into a typed error. The
 * reasons follow the Engine client's (csrc/engine/transfer.c): unreachable, closed, protocol;
 * a passed deadline is kind "timeout" (API.md's run-time timeout) rather than a transport
 * failure, because for readiness it means "no answer yet", not "the link is broken". */
#include <curl/curl.h>

#include "util/error.h"

/* Why a callback ended the transfer. */
enum { SS_PROBE_STOP_NONE, SS_PROBE_STOP_BODY_CAP, SS_PROBE_STOP_HEADER_CAP };

/* Sets err for a transfer that did not yield an answer. errbuf is curl's message (may be ""). */
void ss_probe_error(ss_error *err, CURLcode rc, int stop, const char *url, double timeout, long status,
                    const char *errbuf);

#endif
