/* The sandbox's command under sandstack-init (csrc/stack/init_wrap.c): the engine's merge of a
 * body's Entrypoint and Cmd with the image's, for each form the engine treats differently (what
 * Docker 20.10 answered for each is in spec/docker_deadline_spec.lua, against the engine
 * itself), the wrap, and the unwrap a commit uses. */
#include <stdio.h>
#include <stdlib.h>

#include "deadline/deadline.h"
#include "stack/init_wrap.h"
#include "test/unit.h"

/* JSON text or NULL (absent) */
static cJSON *j(const char *text) { return text ? cJSON_Parse(text) : NULL; }

static char *text_of(const cJSON *v) { return cJSON_PrintUnformatted(v); }

static void merged(ut_run *t, const char *be, const char *bc, const char *ie, const char *ic, const char *want_e,
                   const char *want_c) {
  cJSON *a = j(be), *b = j(bc), *c = j(ie), *d = j(ic), *e, *cmd;
  ss_stack_merge_command(a, b, c, d, &e, &cmd);
  char *te = text_of(e), *tc = text_of(cmd);
  if (!CHECK_STR(te, want_e) || !CHECK_STR(tc, want_c))
    NOTE("body %s %s, image %s %s", be ? be : "-", bc ? bc : "-", ie ? ie : "-", ic ? ic : "-");
  free(te);
  free(tc);
  cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(c), cJSON_Delete(d), cJSON_Delete(e), cJSON_Delete(cmd);
}

static void merges_as_the_engine_does(ut_run *t) {
  const char *img_cmd = "[\"/bin/sh\"]";
  /* an image with a Cmd only (sandstack-test/agent:local) */
  merged(t, NULL, NULL, "null", img_cmd, "[]", "[\"/bin/sh\"]");
  merged(t, NULL, "[]", "null", img_cmd, "[]", "[\"/bin/sh\"]");
  merged(t, NULL, "[\"c1\"]", "null", img_cmd, "[]", "[\"c1\"]");
  merged(t, "[]", NULL, "null", img_cmd, "[]", "[\"/bin/sh\"]");
  merged(t, "[]", "[]", "null", img_cmd, "[]", "[\"/bin/sh\"]");
  merged(t, "[]", "[\"c1\"]", "null", img_cmd, "[]", "[\"c1\"]");
  merged(t, "[\"\"]", NULL, "null", img_cmd, "[]", "[]");
  merged(t, "[\"\"]", "[\"c1\"]", "null", img_cmd, "[]", "[\"c1\"]");
  merged(t, "[\"echo\",\"e\"]", NULL, "null", img_cmd, "[\"echo\",\"e\"]", "[]");
  merged(t, "[\"echo\",\"e\"]", "[]", "null", img_cmd, "[\"echo\",\"e\"]", "[]");
  merged(t, "[\"echo\",\"e\"]", "[\"c1\"]", "null", img_cmd, "[\"echo\",\"e\"]", "[\"c1\"]");
  /* an image with an Entrypoint (sandstack/proxy) */
  const char *img_ep = "[\"/usr/local/bin/sandstack-proxy\"]";
  merged(t, NULL, NULL, img_ep, "null", img_ep, "[]");
  merged(t, NULL, "[\"--ready\"]", img_ep, "null", img_ep, "[\"--ready\"]");
  merged(t, "[]", "[\"c1\"]", img_ep, "null", "[]", "[\"c1\"]");
  merged(t, "[\"\"]", "[\"c1\"]", img_ep, "[\"x\"]", "[]", "[\"c1\"]");
  /* an image with neither, as an inspect without Config members gives it */
  merged(t, NULL, NULL, NULL, NULL, "[]", "[]");
}

static void wraps_the_merged_command_and_unwraps_it_back(ut_run *t) {
  cJSON *be = j("[\"echo\",\"e\"]"), *bc = j("[\"c1\"]"), *e, *c;
  REQUIRE(CHECK_EQ(ss_stack_init_wrap(be, bc, NULL, NULL, &e, &c), 0));
  char *te = text_of(e), *tc = text_of(c);
  CHECK_STR(te, "[\"" DL_PROGRAM "\",\"--\",\"echo\",\"e\"]");
  CHECK_STR(tc, "[\"c1\"]");
  free(te), free(tc);
  cJSON *ue, *uc;
  REQUIRE(CHECK_EQ(ss_stack_init_unwrap(e, c, &ue, &uc), 0));
  te = text_of(ue), tc = text_of(uc);
  CHECK_STR(te, "[\"echo\",\"e\"]");
  CHECK_STR(tc, "[\"c1\"]");
  free(te), free(tc);
  cJSON *again_e, *again_c; /* wrapping what was unwrapped gives one init, not two */
  REQUIRE(CHECK_EQ(ss_stack_init_wrap(ue, uc, NULL, NULL, &again_e, &again_c), 0));
  CHECK(cJSON_Compare(again_e, e, 1));
  cJSON_Delete(ue), cJSON_Delete(uc), cJSON_Delete(again_e), cJSON_Delete(again_c);
  cJSON *none;
  CHECK_EQ(ss_stack_init_unwrap(be, bc, &none, &none), -1); /* not wrapped */
  cJSON *half = j("[\"" DL_PROGRAM "\",\"echo\"]");
  CHECK_EQ(ss_stack_init_unwrap(half, bc, &none, &none), -1);
  CHECK_EQ(ss_stack_init_unwrap(NULL, NULL, &none, &none), -1);
  cJSON_Delete(half), cJSON_Delete(be), cJSON_Delete(bc), cJSON_Delete(e), cJSON_Delete(c);
  /* a command of the image alone: Cmd kept as a list; no Entrypoint: the init and "--" alone */
  cJSON *ic = j("[\"/bin/sh\"]");
  REQUIRE(CHECK_EQ(ss_stack_init_wrap(NULL, NULL, NULL, ic, &e, &c), 0));
  te = text_of(e), tc = text_of(c);
  CHECK_STR(te, "[\"" DL_PROGRAM "\",\"--\"]");
  CHECK_STR(tc, "[\"/bin/sh\"]");
  free(te), free(tc);
  REQUIRE(CHECK_EQ(ss_stack_init_unwrap(e, c, &ue, &uc), 0));
  te = text_of(ue);
  CHECK_STR(te, "[]");
  free(te);
  cJSON_Delete(ue), cJSON_Delete(uc), cJSON_Delete(e), cJSON_Delete(c), cJSON_Delete(ic);
}

static void leaves_a_command_that_merges_to_nothing_to_the_engine(ut_run *t) {
  cJSON *reset = j("[\"\"]"), *ic = j("[\"/bin/sh\"]"), *e = NULL, *c = NULL;
  CHECK_EQ(ss_stack_init_wrap(reset, NULL, NULL, ic, &e, &c), -1);
  CHECK_EQ(ss_stack_init_wrap(NULL, NULL, NULL, NULL, &e, &c), -1);
  CHECK(e == NULL && c == NULL);
  cJSON_Delete(reset), cJSON_Delete(ic);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "stack_init_wrap");
  UT_RUN(&t, merges_as_the_engine_does);
  UT_RUN(&t, wraps_the_merged_command_and_unwraps_it_back);
  UT_RUN(&t, leaves_a_command_that_merges_to_nothing_to_the_engine);
  return ut_end(&t);
}
