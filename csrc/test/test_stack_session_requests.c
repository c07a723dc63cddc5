/* The queries of the named Engine operations (csrc/stack/session_requests.c) that Lua call sites
 * used to write themselves: an archive's path (with put's no-overwrite), a resize's rows and
 * columns, a log's since and tail, an import's repeated changes. A query value is kept as the
 * caller gave it, byte for byte, so the one encoder of the engine client (util/url.h, applied to
 * every query value as it is sent) encodes it once; the import's query, which C writes into the
 * path itself, is encoded here with that encoder. Both checked on values of spaces, '&', '?',
 * '#', '%', '=' and non-ASCII bytes. */
#include <stdlib.h>

#include "stack/session_requests.h"
#include "test/unit.h"
#include "util/url.h"

/* A path no query string survives unencoded: each of these bytes ends or splits a query. */
static const char ODD_PATH[] = "/work/a b&c?d#e%f=g/\xc3\xbc\xe2\x82\xac\xff";
static const char ODD_PATH_ENCODED[] = "%2Fwork%2Fa%20b%26c%3Fd%23e%25f%3Dg%2F%C3%BC%E2%82%AC%FF";

/* The one request of action on name with args (NULL for none); NULL with why set. */
static cJSON *first(const char *action, const char *name, const cJSON *args, const char **why) {
  cJSON *names = cJSON_CreateArray();
  cJSON_AddItemToArray(names, cJSON_CreateString(name));
  *why = NULL;
  cJSON *list = ss_session_requests(action, names, args, why);
  cJSON_Delete(names);
  if (!list) return NULL;
  cJSON *r = cJSON_DetachItemFromArray(list, 0);
  cJSON_Delete(list);
  return r;
}

/* The same with args as JSON text (NULL for none). */
static cJSON *one(const char *action, const char *name, const char *args_json, const char **why) {
  cJSON *args = args_json ? cJSON_Parse(args_json) : NULL;
  cJSON *r = first(action, name, args, why);
  cJSON_Delete(args);
  return r;
}

static const char *query_value(const cJSON *r, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "query"), key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int query_keys(const cJSON *r) { return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "query")); }

/* An archive operation on path (made in C: the odd path cannot be JSON text here). */
static cJSON *archive_op(const char *action, const char *path, int no_overwrite, const char **why) {
  cJSON *args = cJSON_CreateObject();
  cJSON_AddStringToObject(args, "path", path);
  if (no_overwrite) cJSON_AddTrueToObject(args, "no_overwrite");
  cJSON *r = first(action, "p-sandbox", args, why);
  cJSON_Delete(args);
  return r;
}

static void keeps_an_archive_path_byte_for_byte(ut_run *t) {
  const char *ops[] = {"get_archive", "put_archive", "stat_archive"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    const char *why = NULL;
    cJSON *r = archive_op(ops[i], ODD_PATH, 0, &why);
    REQUIRE(CHECK(r != NULL));
    CHECK_STR(query_value(r, "path"), ODD_PATH); /* not encoded here: the client encodes it, once */
    CHECK_EQ(query_keys(r), 1);
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(r, "path");
    CHECK_STR(cJSON_GetStringValue(path), "/containers/p-sandbox/archive"); /* the query never in the path */
    cJSON_Delete(r);
  }
}

static void encodes_the_path_once_when_sent(ut_run *t) {
  const char *why = NULL;
  cJSON *r = archive_op("get_archive", ODD_PATH, 0, &why);
  REQUIRE(CHECK(r != NULL));
  const char *v = query_value(r, "path");
  REQUIRE(CHECK(v != NULL));
  size_t n = strlen(v);
  char *out = malloc(3 * n + 1);
  out[ss_urlencode(out, v, n)] = 0;
  CHECK_STR(out, ODD_PATH_ENCODED);
  free(out);
  cJSON_Delete(r);
}

static void puts_without_overwriting_when_asked(ut_run *t) {
  const char *why = NULL;
  cJSON *r = archive_op("put_archive", "/a dir", 1, &why);
  REQUIRE(CHECK(r != NULL));
  CHECK_STR(query_value(r, "noOverwriteDirNonDir"), "1");
  CHECK_STR(query_value(r, "path"), "/a dir");
  CHECK_EQ(query_keys(r), 2);
  cJSON_Delete(r);
  r = archive_op("put_archive", "/", 0, &why); /* a helper's program: no such guard asked */
  REQUIRE(CHECK(r != NULL));
  CHECK(query_value(r, "noOverwriteDirNonDir") == NULL);
  cJSON_Delete(r);
  r = archive_op("get_archive", "/x", 1, &why); /* only a put takes it */
  REQUIRE(CHECK(r != NULL));
  CHECK_EQ(query_keys(r), 1);
  cJSON_Delete(r);
}

/* action on "ab 12" with args (JSON text) has a query of n keys, k1=v1 and k2=v2 among them. */
static void query_holds(ut_run *t, const char *action, const char *args, int n, const char *k1, const char *v1,
                        const char *k2, const char *v2) {
  const char *why = NULL;
  cJSON *r = one(action, "ab 12", args, &why);
  if (!CHECK(r != NULL)) {
    NOTE("%s %s: %s", action, args, why ? why : "?");
    return;
  }
  CHECK_STR(query_value(r, k1), v1);
  CHECK_STR(query_value(r, k2), v2);
  CHECK_EQ(query_keys(r), n);
  cJSON_Delete(r);
}

static void resizes_by_rows_and_columns(ut_run *t) {
  const char *why = NULL;
  cJSON *r = one("exec_resize", "ab 12", "{\"h\":24,\"w\":80}", &why);
  REQUIRE(CHECK(r != NULL));
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "path")), "/exec/ab%2012/resize");
  cJSON_Delete(r);
  query_holds(t, "exec_resize", "{\"h\":24,\"w\":80}", 2, "h", "24", "w", "80");
  query_holds(t, "exec_resize", "{\"h\":65535,\"w\":1}", 2, "h", "65535", "w", "1");
  const char *refused[] = {NULL, "{\"h\":24}", "{\"w\":80}", "{\"h\":0,\"w\":80}", "{\"h\":24,\"w\":65536}",
                           "{\"h\":2.5,\"w\":80}", "{\"h\":\"24\",\"w\":80}", "{\"h\":-1,\"w\":80}"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    r = one("exec_resize", "e", refused[i], &why);
    if (!CHECK(r == NULL)) {
      NOTE("args %s made a request", refused[i] ? refused[i] : "(none)");
      cJSON_Delete(r);
      continue;
    }
    CHECK(why != NULL && strstr(why, "args.h and args.w") != NULL);
  }
}

static void reads_logs_since_and_tail(ut_run *t) {
  query_holds(t, "logs", "{\"since\":1714567890,\"tail\":0}", 4, "since", "1714567890", "tail", "0");
  query_holds(t, "logs", "{\"since\":1714567890.25}", 3, "since", "1714567890.25", "stdout", "1"); /* as Lua wrote it */
  query_holds(t, "stats", "{\"one_shot\":false}", 1, "stream", "false", "stream", "false");
}

static void imports_with_every_change_encoded(ut_run *t) {
  cJSON *names = NULL, *args = cJSON_CreateObject(), *changes = cJSON_AddArrayToObject(args, "changes");
  cJSON_AddStringToObject(args, "repo", "sandstack/proxy");
  cJSON_AddStringToObject(args, "tag", "v1+2");
  cJSON_AddItemToArray(changes, cJSON_CreateString("ENV P=/a b&c?d#e%f"));
  cJSON_AddItemToArray(changes, cJSON_CreateString("LABEL x=\xc3\xbc\xff"));
  const char *why = NULL;
  cJSON *list = ss_session_requests("import_image", names, args, &why);
  REQUIRE(CHECK(list != NULL));
  const cJSON *r = cJSON_GetArrayItem(list, 0);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "method")), "POST");
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "path")),
            "/images/create?fromSrc=-&repo=sandstack%2Fproxy&tag=v1%2B2&changes=ENV%20P%3D%2Fa%20b%26c%3Fd%23e%25f"
            "&changes=LABEL%20x%3D%C3%BC%FF");
  CHECK(cJSON_GetObjectItemCaseSensitive(r, "query") == NULL);
  cJSON_Delete(list);
  cJSON_DeleteItemFromObject(args, "tag"); /* refused: an import names its tag */
  CHECK(ss_session_requests("import_image", names, args, &why) == NULL);
  CHECK(why != NULL && strstr(why, "args.tag") != NULL);
  cJSON_AddStringToObject(args, "tag", "t");
  cJSON_AddItemToArray(changes, cJSON_CreateNumber(1)); /* refused: a change is text */
  CHECK(ss_session_requests("import_image", names, args, &why) == NULL);
  cJSON_Delete(args);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "stack_session_requests");
  UT_RUN(&t, keeps_an_archive_path_byte_for_byte);
  UT_RUN(&t, encodes_the_path_once_when_sent);
  UT_RUN(&t, puts_without_overwriting_when_asked);
  UT_RUN(&t, resizes_by_rows_and_columns);
  UT_RUN(&t, reads_logs_since_and_tail);
  UT_RUN(&t, imports_with_every_change_encoded);
  return ut_end(&t);
}
