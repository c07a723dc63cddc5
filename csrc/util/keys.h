#ifndef SANDSTACK_UTIL_KEYS_H
#define SANDSTACK_UTIL_KEYS_H
/* The keys of an options table (API.md): a key not in the list of allowed names is an unknown
 * option, a programming error, never silently ignored. The one rule and the one wording for
 * every options check: the Lua binding's (csrc/lua/helpers.c: ss_check_keys in C, and
 * core.check_keys, which is sandstack.error.check_keys) and the stack model's over JSON
 * (csrc/stack/validate.c). */

#include <stddef.h>

/* 1 when key is one of the NULL-ended allowed names. */
int ss_key_allowed(const char *const allowed[], const char *key);

/* The edit distance of a and b (insertions, deletions, substitutions), or a large number when
 * either is longer than SS_KEY_MAX: option names are short, and the table stays on the stack. */
#define SS_KEY_MAX 64
int ss_key_distance(const char *a, const char *b);

/* Whether a name `distance` edits from key is near enough to be the name meant (a typo). */
int ss_key_near(const char *key, int distance);

/* " (did you mean 'name'?)" for the allowed name nearest to key when it is near enough, else
 * "", into buf (n bytes). */
void ss_key_hint(const char *const allowed[], const char *key, char *buf, size_t n);

/* The refusal: printf format of (what, key, hint). */
#define SS_UNKNOWN_OPTION_FMT "%s: unknown option '%s'%s"

#endif
