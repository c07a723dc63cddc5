#include "probe/probe_error.h"

#include "probe/http_probe.h"

static const char *detail(CURLcode rc, const char *errbuf) {
  return errbuf && errbuf[0] ? errbuf : curl_easy_strerror(rc);
}

/* How a failed transfer reads: kind, reason and what happened, after curl's code. */
typedef struct {
  const char *kind, *reason, *what;
} failure;

static failure classify(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return (failure){"transport", "unreachable", "cannot connect"};
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      return (failure){"transport", "closed", "the connection was dropped"};
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return (failure){"invalid", "bad_url", "not a plain http URL"};
    default:
      return (failure){"transport", "protocol", "the request failed"};
  }
}

void ss_probe_error(ss_error *err, CURLcode rc, int stop, const char *url, double timeout, long status,
                    const char *errbuf) {
  if (stop == SS_PROBE_STOP_HEADER_CAP) {
    ss_error_set(err, "transport", "headers_too_large", "GET %.512s: the answer's headers exceed %d bytes", url,
                 SS_PROBE_HEADERS_MAX);
  } else if (rc == CURLE_OPERATION_TIMEDOUT) {
    ss_error_set(err, "timeout", "deadline", "GET %.512s: no complete answer within %gs", url, timeout);
    ss_error_field_str(err, "phase", "request");
  } else {
    failure f = classify(rc);
    ss_error_set(err, f.kind, f.reason, "GET %.512s: %s (%s)", url, f.what, detail(rc, errbuf));
  }
  ss_error_field_str(err, "url", url);
  ss_error_field_num(err, "timeout", timeout);
  if (status) ss_error_field_num(err, "status", (double)status);
}
