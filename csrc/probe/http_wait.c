/* The readiness wait over the probe (http_wait.h). */
#include "probe/http_wait.h"

#include <stdio.h>

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

void ss_http_wait(const char *url, const ss_wait_opts *o, ss_wait_result *r) {
  r->ready = 0;
  r->last[0] = '\0';
  r->answer[0] = '\0';
  double start = ss_monotonic_now(), now = start;
  for (;;) {
    ss_probe_opts po = {.timeout = clamp(o->deadline - now, o->min_attempt, o->attempt_cap), .max_bytes = o->max_bytes};
    ss_probe_result pr;
    ss_error err;
    ss_error_init(&err);
    if (ss_http_probe(url, &po, &pr, &err) == 0) {
      if (pr.status >= 200 && pr.status < 300) r->ready = 1;
      snprintf(r->last, sizeof r->last, "HTTP %ld", pr.status);
      snprintf(r->answer, sizeof r->answer, "HTTP %ld", pr.status);
    } else {
      snprintf(r->last, sizeof r->last, "%s: %s", err.kind[0] ? err.kind : "error", err.message);
      ss_error_clear(&err);
    }
    now = ss_monotonic_now();
    if (r->ready || now >= o->deadline || now - start >= o->slice) break;
    double left = o->deadline - now;
    ss_sleep(o->pause < left ? o->pause : left);
    now = ss_monotonic_now();
  }
  r->now = now;
}
