/* The rows of each level of the start options, for the reference (core.stack_options, read by
 * scripts/api_tables.lua): the same X-macro lists the validator takes its names from
 * (options.h), expanded into their four cells. */
#include <string.h>

#include "stack/options.h"

static const ss_option_doc START[] = {SS_OPTIONS_START(SS_OPTION_DOC)};
static const ss_option_doc SERVICE[] = {SS_OPTIONS_SERVICE(SS_OPTION_DOC)};
static const ss_option_doc MOUNT[] = {SS_OPTIONS_MOUNT(SS_OPTION_DOC)};
static const ss_option_doc VOLUME[] = {SS_OPTIONS_VOLUME(SS_OPTION_DOC)};
static const ss_option_doc READY[] = {SS_OPTIONS_READY(SS_OPTION_DOC)};
static const ss_option_doc NETWORK[] = {SS_OPTIONS_NETWORK(SS_OPTION_DOC)};
static const ss_option_doc PORT[] = {SS_OPTIONS_PORT(SS_OPTION_DOC)};
static const ss_option_doc CREDENTIAL[] = {SS_OPTIONS_CREDENTIAL(SS_OPTION_DOC)};

#define LEVEL(name, rows) {name, rows, sizeof rows / sizeof rows[0]}

const ss_option_doc *ss_stack_option_docs(const char *level, size_t *n) {
  static const struct {
    const char *level;
    const ss_option_doc *rows;
    size_t n;
  } LEVELS[] = {LEVEL("start", START),     LEVEL("service", SERVICE), LEVEL("mount", MOUNT),
                LEVEL("volume", VOLUME),   LEVEL("ready", READY),     LEVEL("network", NETWORK),
                LEVEL("port", PORT),       LEVEL("credential", CREDENTIAL)};
  for (size_t i = 0; i < sizeof LEVELS / sizeof LEVELS[0]; i++)
    if (strcmp(LEVELS[i].level, level) == 0) {
      *n = LEVELS[i].n;
      return LEVELS[i].rows;
    }
  *n = 0;
  return NULL;
}
