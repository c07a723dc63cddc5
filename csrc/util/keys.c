/* The options-key rule (keys.h). */
#include "util/keys.h"

#include <stdio.h>
#include <string.h>

int ss_key_allowed(const char *const allowed[], const char *key) {
  for (int i = 0; allowed[i]; i++)
    if (strcmp(allowed[i], key) == 0) return 1;
  return 0;
}

static int min3(int a, int b, int c) {
  int m = a < b ? a : b;
  return m < c ? m : c;
}

int ss_key_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > SS_KEY_MAX || lb > SS_KEY_MAX) return SS_KEY_MAX * 2;
  int prev[SS_KEY_MAX + 1], cur[SS_KEY_MAX + 1];
  for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; j++)
      cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]));
    memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
  }
  return prev[lb];
}

/* Two edits, or a third of the name for longer ones: "agent_prot" finds agent_port, "x" finds
 * nothing it merely shares a letter with. */
int ss_key_near(const char *key, int distance) {
  int len = (int)strlen(key);
  int limit = len / 3 > 2 ? len / 3 : 2;
  return distance > 0 && distance <= limit && distance < len;
}

void ss_key_hint(const char *const allowed[], const char *key, char *buf, size_t n) {
  const char *best = NULL;
  int bd = 0;
  for (int i = 0; allowed[i]; i++) {
    int d = ss_key_distance(key, allowed[i]);
    if (!best || d < bd) best = allowed[i], bd = d;
  }
  if (best && ss_key_near(key, bd))
    snprintf(buf, n, " (did you mean '%s'?)", best);
  else if (n > 0)
    buf[0] = '\0';
}
