#ifndef SANDSTACK_ENGINE_CAUSE_H
#define SANDSTACK_ENGINE_CAUSE_H
/* What an engine's error message says, as a word the callers compare (err.cause): the daemon's
 * text is read here once, so no caller matches it. NULL when the message says nothing a caller
 * acts on. Pure. */
const char *sse_engine_cause(const char *message);

#endif
