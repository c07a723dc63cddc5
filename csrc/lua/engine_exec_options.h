/* The options of eng:exec, one X-macro list: name, type, default and "refused when", the cells
 * of its table in docs/api/engine.md. exec's key check (engine_exec.c) and the rows
 * core.exec_options hands the docs' generator (scripts/api_tables.lua) both expand it, so an
 * option cannot be accepted without a row, nor documented without being accepted. Each
 * X(name, type, default, refused), as the start options' lists (stack/options.h). */
#ifndef SS_LUA_ENGINE_EXEC_OPTIONS_H
#define SS_LUA_ENGINE_EXEC_OPTIONS_H

#include "stack/options.h"

#define SS_OPTIONS_EXEC(X) \
  X("user", "string", "the image's", "not a string (raises)") \
  X("env", "table", "none", "not a table of `\"K=V\"` or named values (raises)") \
  X("workdir", "string", "the image's", "not a string (raises)") \
  X("max_bytes", "bytes", "8 MiB, both streams", "not above 0; under 1, over 1e15 raise; past it: `output_limit`") \
  X("timeout", "seconds", "the client's", "not above 0; past it: `timeout`") \
  X("stdin", "string, any bytes", "none", \
    "not a string (raises); written to stdin while the output is read, then closed")

#endif
