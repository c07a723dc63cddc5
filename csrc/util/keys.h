#ifndef SANDSTACK_UTIL_KEYS_H
#define SANDSTACK_UTIL_KEYS_H
/* The keys of an options table (API.md): a key not in the list of allowed names is an unknown
 * option, a programming error, never silently ignored. The one rule and the one wording for
 * every options check: the Lua binding's (csrc/lua/helpers.c: ss_check_keys in C, and
 * core.check_keys, which is sandstack.error.check_keys) and the stack model's over JSON
 * (csrc/stack/validate.c). */

/* 1 when key is one of the NULL-ended allowed names. */
int ss_key_allowed(const char *const allowed[], const char *key);

/* The refusal: printf format of (what, key). */
#define SS_UNKNOWN_OPTION_FMT "%s: unknown option '%s'"

#endif
