#include "probe/http_probe.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "probe/probe_error.h"

/* The counters the callbacks update; it lives on ss_http_probe's stack. */
typedef struct probe_state {
  size_t max_bytes;
  size_t bytes;
  size_t header_bytes;
  int stop;
} probe_state;

/* libcurl needs curl_global_init once per process before handles are made from several
 * threads; the Engine client does the same with its own once-flag, and libcurl counts the
 * calls, so the two never conflict. This is init-once state, not mutable state. */
static pthread_once_t probe_curl_once = PTHREAD_ONCE_INIT;
static CURLcode probe_curl_rc = CURLE_FAILED_INIT;
static void probe_curl_init(void) { probe_curl_rc = curl_global_init(CURL_GLOBAL_ALL); }

/* The body is counted and dropped: readiness needs the status, and keeping a hostile agent's
 * body is how a 512 MiB answer became 1.5 GiB of host memory. Past the cap the transfer ends
 * (returning short makes libcurl stop with CURLE_WRITE_ERROR, read as "enough"). */
static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  (void)p;
  probe_state *s = ud;
  size_t n = size * nmemb;
  size_t room = s->max_bytes - s->bytes;
  if (n > room) {
    s->bytes += room;
    s->stop = SS_PROBE_STOP_BODY_CAP;
    return 0;
  }
  s->bytes += n;
  return n;
}

/* Header lines are not kept either, only counted: an endless header block (or an endless run
 * of 1xx answers) is refused once it passes the cap, whatever the deadline. */
static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  (void)p;
  probe_state *s = ud;
  size_t n = size * nmemb;
  s->header_bytes += n;
  if (s->header_bytes > SS_PROBE_HEADERS_MAX) {
    s->stop = SS_PROBE_STOP_HEADER_CAP;
    return 0;
  }
  return n;
}

int ss_probe_url_ok(const char *url) {
  size_t n = strlen(url);
  if (n <= 7 || n > SS_PROBE_URL_MAX || strncasecmp(url, "http://", 7) != 0) return 0;
  for (const unsigned char *c = (const unsigned char *)url; *c; c++)
    if (*c <= ' ' || *c >= 0x7f) return 0; /* no request splitting, no spaces for curl to "fix" */
  return 1;
}

static long to_ms(double seconds) {
  double ms = seconds * 1000.0 + 0.999;
  if (ms < 1.0) return 1L;
  if (ms > 86400000.0) return 86400000L;
  return (long)ms;
}

#define SET(opt, val) ok = ok && curl_easy_setopt(easy, opt, val) == CURLE_OK

static int setup(CURL *easy, const char *url, const ss_probe_opts *o, probe_state *s, char *errbuf) {
  int ok = 1;
  long ms = to_ms(o->timeout);
  SET(CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
  SET(CURLOPT_PROTOCOLS_STR, "http");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http");
#else
  SET(CURLOPT_PROTOCOLS, (long)CURLPROTO_HTTP);
  SET(CURLOPT_REDIR_PROTOCOLS, (long)CURLPROTO_HTTP);
#endif
  SET(CURLOPT_HTTPGET, 1L);
  SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  SET(CURLOPT_FOLLOWLOCATION, 0L); /* a 3xx is an answer, not ready: never act on it */
  SET(CURLOPT_MAXREDIRS, 0L);
  /* The agent is reached directly: an http_proxy/ALL_PROXY of the host process must not see
   * (or divert) the request. "" disables the environment's proxy, "*" exempts every host. */
  SET(CURLOPT_PROXY, "");
  SET(CURLOPT_NOPROXY, "*");
  SET(CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
  SET(CURLOPT_ACCEPT_ENCODING, NULL); /* no decompression: bytes counted are bytes received */
  SET(CURLOPT_HTTP09_ALLOWED, 0L);
  SET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: we run in threads of a host process (OpenResty) */
  SET(CURLOPT_TIMEOUT_MS, ms); /* one deadline for everything: a drip cannot extend it */
  SET(CURLOPT_CONNECTTIMEOUT_MS, ms);
  SET(CURLOPT_ERRORBUFFER, errbuf);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, s);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, s);
  return ok;
}

int ss_http_probe(const char *url, const ss_probe_opts *o, ss_probe_result *r, ss_error *err) {
  memset(r, 0, sizeof *r);
  if (!url || !ss_probe_url_ok(url)) {
    ss_error_set(err, "invalid", "bad_url", "the probe takes an absolute http:// URL of at most %d printable bytes",
                 SS_PROBE_URL_MAX);
    return -1;
  }
  if (!(o->timeout > 0)) {
    ss_error_set(err, "invalid", "bad_timeout", "the probe needs a timeout > 0");
    return -1;
  }
  pthread_once(&probe_curl_once, probe_curl_init);
  if (probe_curl_rc != CURLE_OK) {
    ss_error_set(err, "transport", "curl", "curl_global_init failed: %s", curl_easy_strerror(probe_curl_rc));
    return -1;
  }
  CURL *easy = curl_easy_init();
  char errbuf[CURL_ERROR_SIZE] = "";
  probe_state s = {.max_bytes = o->max_bytes};
  if (!easy || !setup(easy, url, o, &s, errbuf)) {
    if (easy) curl_easy_cleanup(easy);
    ss_error_set(err, "transport", "curl", "could not set up the probe");
    return -1;
  }
  CURLcode rc = curl_easy_perform(easy);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(easy);
  /* Ended by the body cap: the final answer's status is known, which is all that is asked. */
  int answered = (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && s.stop == SS_PROBE_STOP_BODY_CAP)) && status >= 200;
  if (!answered) {
    ss_probe_error(err, rc, s.stop, url, o->timeout, status, errbuf);
    return -1;
  }
  r->status = status;
  r->bytes = s.bytes;
  r->truncated = s.stop == SS_PROBE_STOP_BODY_CAP;
  return 0;
}
