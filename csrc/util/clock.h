#ifndef SANDSTACK_UTIL_CLOCK_H
#define SANDSTACK_UTIL_CLOCK_H
/* Seconds on the monotonic clock: every deadline of the core is measured on it, never on the
 * wall clock (which an operator or NTP may step). */
double ss_monotonic_now(void);

/* Blocks this thread for the given seconds (nothing for <= 0); a signal does not cut it short. */
void ss_sleep(double seconds);

#endif
