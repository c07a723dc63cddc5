#include "probe/probe_error.h"

#include "probe/http_probe.h"

static const char *detail(CURLcode rc, const char *errbuf) {
  return errbuf && errbuf[0] ? errbuf : curl_easy_strerror(rc);
}

void ss_probe_error(ss_error *err, CURLcode rc, int stop, const char *url, double timeout, long status,
                    const char *errbuf) {
  if (stop == SS_PROBE_STOP_HEADER_CAP) {
    ss_error_set(err, "transport", "headers_too_large", "GET %.512s: the answer's headers exceed %d bytes", url,
                 SS_PROBE_HEADERS_MAX);
  } else {
    switch (rc) {
      case CURLE_OPERATION_TIMEDOUT:
        ss_error_set(err, "timeout", "deadline", "GET %.512s: no complete answer within %gs", url, timeout);
        ss_error_field_str(err, "phase", "request");
        break;
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
        ss_error_set(err, "transport", "unreachable", "GET %.512s: cannot connect (%s)", url, detail(rc, errbuf));
        break;
      case CURLE_GOT_NOTHING:
      case CURLE_PARTIAL_FILE:
      case CURLE_RECV_ERROR:
      case CURLE_SEND_ERROR:
        ss_error_set(err, "transport", "closed", "GET %.512s: the connection was dropped (%s)", url, detail(rc, errbuf));
        break;
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        ss_error_set(err, "invalid", "bad_url", "GET %.512s: not a plain http URL (%s)", url, detail(rc, errbuf));
        break;
      default:
        ss_error_set(err, "transport", "protocol", "GET %.512s: the request failed (%s)", url, detail(rc, errbuf));
        break;
    }
  }
  ss_error_field_str(err, "url", url);
  ss_error_field_num(err, "timeout", timeout);
  if (status) ss_error_field_num(err, "status", (double)status);
}
