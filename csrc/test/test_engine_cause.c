/* What an engine's error message says (csrc/engine/cause.c), on the daemons' own texts. */
#include "engine/cause.h"
#include "test/unit.h"

static void names_each_cause(ut_run *t) {
  CHECK_STR(sse_engine_cause("Container abc is already paused"), "already_paused");
  CHECK_STR(sse_engine_cause("Container abc is not paused"), "not_paused");
  CHECK_STR(sse_engine_cause("Container abc is not running"), "not_running");
  CHECK_STR(sse_engine_cause("driver failed programming external connectivity on endpoint x: Bind for "
                             "127.0.0.1:8080 failed: port is already allocated"),
            "port_taken");
  CHECK_STR(sse_engine_cause("listen tcp4 127.0.0.1:9000: bind: address already in use"), "port_taken");
  CHECK_STR(sse_engine_cause("could not find an available, non-overlapping IPv4 address pool among the "
                             "defaults to assign to the network"),
            "no_subnet");
  CHECK_STR(sse_engine_cause("all predefined address pools have been fully subnetted"), "no_subnet");
  CHECK_STR(sse_engine_cause("Pool overlaps with other one on this address space"), "subnet_overlap");
  CHECK_STR(sse_engine_cause("checkpoint with name sandstack already exists for container x"), "checkpoint_exists");
  CHECK_STR(sse_engine_cause("failed to checkpoint: criu: executable file not found in $PATH"), "criu_missing");
  CHECK_STR(sse_engine_cause("network x is in use by task y"), "in_use_by_task");
  CHECK_STR(sse_engine_cause("update out of sequence"), "out_of_sequence");
  CHECK_STR(sse_engine_cause("exec abc is already running"), "already_running");
}

static void says_nothing_of_other_messages(ut_run *t) {
  CHECK(sse_engine_cause(NULL) == NULL);
  CHECK(sse_engine_cause("") == NULL);
  CHECK(sse_engine_cause("No such container: abc") == NULL);
  CHECK(sse_engine_cause("criu failed: dump error (see the log)") == NULL); /* criu, but present */
  CHECK_STR(sse_engine_cause("failed to restore: checkpoint read error"), "checkpoint");
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  ut_run t;
  ut_begin(&t, "engine_cause");
  UT_RUN(&t, names_each_cause);
  UT_RUN(&t, says_nothing_of_other_messages);
  return ut_end(&t);
}
