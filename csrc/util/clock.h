#ifndef SANDSTACK_UTIL_CLOCK_H
#define SANDSTACK_UTIL_CLOCK_H
/* Seconds on the monotonic clock: every deadline of the core is measured on it, never on the
 * wall clock (which an operator or NTP may step). */
double ss_monotonic_now(void);

#endif
