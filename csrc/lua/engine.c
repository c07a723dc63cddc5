/* The binding of the Engine API transport (csrc/engine): a handle class over one sse_client.
 * lua/sandstack/engine.lua builds the public sandstack.engine API on these primitives:
 *   core.engine_client{host=, tls=, tls_verify=, ca=, cert=, key=}[, negotiate]
 *       -> handle[, api_version] | nil, err   (negotiate: seconds for GET /version)
 *   h:submit(method, target, body|nil, {content_type=, headers={"K: V"}, timeout=,
 *            connect_timeout=, max_bytes=, mode="buffer"|"demux"|"file"|"lines"|"stream", file=,
 *            upload_file=, upload_len=, upload_zeros=})
 *   upload_file: a PUT whose body is `body`, then upload_len bytes of that file, then
 *   upload_zeros zero bytes, streamed (client.h); upload_data: the same from a string, sent in
 *   place (the caller keeps it alive until the transfer is taken); upload_tree (with
 *   upload_top): a PUT whose body is a tar of that host directory, made as it is sent
 *   (capture/tree_tar.c), its members named upload_top/...
 *       -> id | nil, err
 *   h:run(id, timeout) -> bool   (id 0: any finished; id -1: sleep; timeout nil: no limit)
 *   h:await_headers(id, timeout) -> bool (the response headers came, or the transfer ended)
 *   h:take(id[, settle]) -> result | nil   (id 0: the oldest finished; settle: see h_take)
 *   h:line(id) -> string | nil   h:state(id) -> "running"|"done"|nil, status (once the headers came)
 *   mode "stream": the 2xx body is read by a C reader of the transfer (core.archive_place)
 *   h:cancel(id)  h:finished()  h:close()
 *   core.engine_clock() -> monotonic seconds
 * A result is {id=, status=, body=, headers={lowercased=value}, content_type=, stdout=,
 * stderr=, file_bytes=, message= (status >= 300), err= (transfer failed)}. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>

#include "capture/capture.h"
#include "engine/client.h"
#include "engine/errmsg.h"
#include "lua/binding.h"
#include "lua/engine_handle.h"
#include "util/clock.h"

#define ENGINE_HANDLE_MT "sandstack.engine.handle"
#define MAX_HEADERS 64

typedef struct {
  sse_client *c;
} handle;

static handle *check_handle(lua_State *L) {
  handle *h = luaL_checkudata(L, 1, ENGINE_HANDLE_MT);
  if (!h->c) luaL_error(L, "the engine client is closed");
  return h;
}

static int h_close(lua_State *L) {
  handle *h = luaL_checkudata(L, 1, ENGINE_HANDLE_MT);
  sse_client_free(h->c);
  h->c = NULL;
  return 0;
}

static const char *opt_str(lua_State *L, int idx, const char *key) {
  return ss_opt_string(L, idx, key, NULL);
}

/* The API version to prefix every later request with: unversioned /version runs at the daemon's
 * maximum, and its ApiVersion is that maximum (never MinAPIVersion). Pushes the version and
 * returns 1, or closes the client and pushes nil, err (returns 2). The answer is settled as
 * every other (engine_settle.c). */
/* The error of a server that answered /version, but not as a Docker Engine does. */
static int not_docker(lua_State *L, const char *host, long status) {
  ss_error err;
  ss_error_init(&err);
  if (status)
    ss_error_set(&err, "engine", "not_docker", "the server at %.200s is not a Docker Engine: it answered GET /version "
                 "with HTTP %ld (is DOCKER_HOST right?)", host ? host : "?", status);
  else
    ss_error_set(&err, "engine", "not_docker", "the server at %.200s is not a Docker Engine: its /version has no "
                 "usable ApiVersion (is DOCKER_HOST right?)", host ? host : "?");
  ss_error_field_str(&err, "method", "GET");
  ss_error_field_str(&err, "path", "/version");
  if (host) ss_error_field_str(&err, "engine", host);
  if (status) ss_error_field_num(&err, "status", (double)status);
  ss_push_error_object(L, &err);
  return 2;
}

static int negotiate(lua_State *L, handle *h, double timeout, const char *host) {
  ss_request req = {.method = "GET", .path = "/version", .target = "/version"};
  sse_spec spec = {.method = "GET", .target = "/version", .timeout = timeout, .max_bytes = 16u << 20,
                   .mode = SSE_BODY_BUFFER, .fd = -1};
  ss_error err;
  ss_error_init(&err);
  long id = sse_client_submit(h->c, &spec, &err);
  if (id < 0) {
    sse_client_free(h->c);
    h->c = NULL;
    return ss_push_error(L, &err);
  }
  sse_client_run(h->c, id, -1);
  sse_result *r = sse_client_take(h->c, id);
  if (!r) sse_client_cancel(h->c, id);
  ss_push_settled(L, r, &req);
  if (r) sse_result_free(r);
  int res = lua_gettop(L);
  lua_getfield(L, res, "ok");
  int ok = lua_toboolean(L, -1);
  lua_getfield(L, res, "body");
  if (ok && lua_istable(L, -1)) {
    lua_getfield(L, -1, "ApiVersion");
    size_t len = 0;
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    size_t i = 0, major = 0, minor = 0;
    while (v && i < len && v[i] >= '0' && v[i] <= '9') i++, major++;
    if (v && i < len && v[i] == '.') {
      for (i++; i < len && v[i] >= '0' && v[i] <= '9'; i++) minor++;
      if (major && minor && i == len) return 1; /* "1.41" */
    }
  }
  sse_client_free(h->c);
  h->c = NULL;
  lua_getfield(L, res, "status");
  long status = (long)lua_tonumber(L, -1);
  lua_pushnil(L);
  if (!ok && !status) { /* no answer at all: the transport's error, which names the address */
    lua_getfield(L, res, "err");
    return 2;
  }
  return not_docker(L, host, ok ? 0 : status);
}

/* core.engine_client(cfg[, negotiate]) -> handle[, api_version] | nil, err. With negotiate (the
 * request's deadline in seconds), the API version is asked in the same call. */
static int l_engine_client(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const keys[] = {"host", "tls", "tls_verify", "ca", "cert", "key", NULL};
  ss_check_keys(L, 1, keys, "engine_client");
  double timeout = (double)luaL_optnumber(L, 2, 0); /* read before anything is pushed */
  lua_settop(L, 1);
  sse_config cfg = {
      .host = opt_str(L, 1, "host"),
      .tls = ss_opt_boolean(L, 1, "tls", 0),
      .tls_verify = ss_opt_boolean(L, 1, "tls_verify", 1),
      .ca = opt_str(L, 1, "ca"),
      .cert = opt_str(L, 1, "cert"),
      .key = opt_str(L, 1, "key"),
  };
  ss_error err;
  ss_error_init(&err);
  handle *h = ss_newuserdata(L, sizeof *h);
  h->c = NULL;
  luaL_getmetatable(L, ENGINE_HANDLE_MT);
  lua_setmetatable(L, -2);
  h->c = sse_client_new(&cfg, &err);
  if (!h->c) return ss_push_error(L, &err);
  if (!(timeout > 0)) return 1;
  int handle_idx = lua_gettop(L);
  int n = negotiate(L, h, timeout, cfg.host);
  if (n == 2) return 2;
  lua_pushvalue(L, handle_idx);
  lua_insert(L, -2);
  return 2;
}

static sse_body_mode check_mode(lua_State *L, const char *m) {
  if (!m || strcmp(m, "buffer") == 0) return SSE_BODY_BUFFER;
  if (strcmp(m, "demux") == 0) return SSE_BODY_DEMUX;
  if (strcmp(m, "file") == 0) return SSE_BODY_FILE;
  if (strcmp(m, "lines") == 0) return SSE_BODY_LINES;
  if (strcmp(m, "stream") == 0) return SSE_BODY_STREAM;
  luaL_error(L, "submit: unknown mode '%s'", m);
  return SSE_BODY_BUFFER;
}

/* Sizes arrive as Lua numbers; anything not a positive finite count is a caller bug. */
static size_t opt_size(lua_State *L, int idx, const char *key, size_t def) {
  double v = ss_opt_number(L, idx, key, (double)def);
  if (!(v >= 1 && v <= 1e15)) luaL_error(L, "option '%s' must be a positive byte count", key);
  return (size_t)v;
}

/* Host I/O fails as kind "io", reason the errno name, as the capture and the file plane do. */
static int open_error(lua_State *L, const char *path, int e) {
  ss_error err;
  ss_error_init(&err);
  const char *ename = strerrorname_np(e);
  ss_error_set(&err, "io", ename ? ename : "EIO", "cannot open '%.200s' for writing: %s", path, strerror(e));
  ss_error_field_str(&err, "path", path);
  ss_error_field_num(&err, "errno", e);
  return ss_push_error(L, &err);
}

static ssize_t tree_read(void *ctx, void *buf, size_t n) { return cap_tree_tar_read(ctx, buf, n); }
static void tree_free(void *ctx) { cap_tree_tar_close(ctx); }

static int h_submit(lua_State *L) {
  handle *h = check_handle(L);
  const char *method = luaL_checkstring(L, 2);
  const char *target = luaL_checkstring(L, 3);
  size_t body_len = 0;
  const char *body = lua_isnoneornil(L, 4) ? NULL : luaL_checklstring(L, 4, &body_len);
  static const char *const keys[] = {"content_type", "headers", "timeout", "connect_timeout",
                                     "max_bytes", "mode", "file", "upload_file", "upload_len", "upload_zeros", "upload_data",
                                     "upload_tree", "upload_top", NULL};
  ss_check_keys(L, 5, keys, "submit");
  sse_spec spec = {
      .method = method,
      .target = target,
      .body = body,
      .body_len = body_len,
      .content_type = opt_str(L, 5, "content_type"),
      .timeout = ss_opt_number(L, 5, "timeout", 30),
      .connect_timeout = ss_opt_number(L, 5, "connect_timeout", 0),
      .max_bytes = opt_size(L, 5, "max_bytes", 16u << 20),
      .mode = check_mode(L, opt_str(L, 5, "mode")),
      .fd = -1,
      .upload_file = opt_str(L, 5, "upload_file"),
      .upload_len = (unsigned long long)ss_opt_number(L, 5, "upload_len", 0),
      .upload_zeros = (unsigned long long)ss_opt_number(L, 5, "upload_zeros", 0),
  };
  /* upload_data: sent in place; the caller (stream.lua's upload) keeps the string alive and
   * waits for the transfer before it returns */
  if (!spec.upload_file && !lua_isnoneornil(L, 5)) {
    lua_getfield(L, 5, "upload_data");
    if (lua_type(L, -1) == LUA_TSTRING) {
      size_t dlen;
      spec.upload_data = lua_tolstring(L, -1, &dlen);
      spec.upload_len = dlen;
    }
    lua_pop(L, 1);
  }
  const char *lines[MAX_HEADERS];
  size_t n = 0;
  if (!lua_isnoneornil(L, 5)) {
    lua_getfield(L, 5, "headers");
    if (lua_istable(L, -1)) {
      size_t len = ss_rawlen(L, -1);
      if (len > MAX_HEADERS) luaL_error(L, "submit: more than %d headers", MAX_HEADERS);
      for (size_t i = 1; i <= len; i++) {
        lua_rawgeti(L, -1, (int)i);
        /* Strings only: a converted number would be a temporary the pop below could free. */
        const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!s || strpbrk(s, "\r\n")) luaL_error(L, "submit: headers must be strings without CR/LF");
        lines[n++] = s; /* kept alive by the headers table, itself held by the options */
        lua_pop(L, 1);
      }
    } else if (!lua_isnil(L, -1)) {
      luaL_error(L, "submit: headers must be a list of 'Name: value' strings");
    }
    lua_pop(L, 1);
  }
  spec.headers = lines;
  spec.nheaders = n;
  const char *tree = opt_str(L, 5, "upload_tree"), *top = opt_str(L, 5, "upload_top");
  if (tree && (!top || spec.mode == SSE_BODY_FILE))
    luaL_error(L, "submit: option 'upload_tree' needs 'upload_top' and no file");
  if (spec.mode == SSE_BODY_FILE) {
    const char *path = opt_str(L, 5, "file");
    if (!path) luaL_error(L, "submit: mode 'file' needs option 'file'");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return open_error(L, path, errno);
    spec.fd = fd;
    spec.close_fd = 1;
  }
  if (tree) {
    ss_error terr;
    ss_error_init(&terr);
    cap_tree_tar *t = cap_tree_tar_open(tree, top, &terr);
    if (!t) return ss_push_error(L, &terr);
    spec.upload_read = tree_read;
    spec.upload_free = tree_free;
    spec.upload_ctx = t; /* the transfer's from here on, even when the submit is refused */
  }
  ss_error err;
  ss_error_init(&err);
  long id = sse_client_submit(h->c, &spec, &err);
  if (id < 0) return ss_push_error(L, &err);
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

static int h_run(lua_State *L) {
  handle *h = check_handle(L);
  long id = (long)luaL_checkinteger(L, 2);
  double timeout = luaL_optnumber(L, 3, -1);
  if (timeout != timeout) timeout = 0; /* NaN */
  lua_pushboolean(L, sse_client_run(h->c, id, timeout));
  return 1;
}

/* Pushes {lowercased name = value} from raw "Name: value\r\n" lines; a repeated name keeps the
 * values joined by ", " as HTTP allows. */
static void push_headers(lua_State *L, const ss_buf *b) {
  lua_newtable(L);
  const char *p = b->data, *end = b->data ? b->data + b->len : NULL;
  while (p && p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = eol ? eol : end;
    const char *colon = memchr(p, ':', (size_t)(line_end - p));
    if (colon && colon > p) {
      luaL_Buffer name;
      luaL_buffinit(L, &name);
      for (const char *q = p; q < colon; q++) luaL_addchar(&name, (char)tolower((unsigned char)*q));
      luaL_pushresult(&name);
      const char *v = colon + 1, *ve = line_end;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (unsigned char)ve[-1] <= ' ') ve--;
      lua_pushvalue(L, -1);
      lua_rawget(L, -3);
      if (lua_isstring(L, -1)) {
        lua_pushliteral(L, ", ");
        lua_pushlstring(L, v, (size_t)(ve - v));
        lua_concat(L, 3);
      } else {
        lua_pop(L, 1);
        lua_pushlstring(L, v, (size_t)(ve - v));
      }
      lua_rawset(L, -3);
    }
    p = eol ? eol + 1 : end;
  }
}

static void set_str(lua_State *L, const char *key, const ss_buf *b) {
  lua_pushlstring(L, b->data ? b->data : "", b->len);
  lua_setfield(L, -2, key);
}

static void push_result(lua_State *L, sse_result *r) {
  lua_newtable(L);
  lua_pushinteger(L, (lua_Integer)r->id);
  lua_setfield(L, -2, "id");
  if (r->status) {
    lua_pushinteger(L, (lua_Integer)r->status);
    lua_setfield(L, -2, "status");
  }
  set_str(L, "body", &r->body);
  push_headers(L, &r->headers);
  lua_setfield(L, -2, "headers");
  lua_pushstring(L, r->content_type);
  lua_setfield(L, -2, "content_type");
  set_str(L, "stdout", &r->demux.out);
  set_str(L, "stderr", &r->demux.err);
  lua_pushinteger(L, (lua_Integer)r->file_bytes);
  lua_setfield(L, -2, "file_bytes");
  if (r->status >= 300) {
    char msg[1024];
    sse_error_message(r->body.data, r->body.len, msg, sizeof msg);
    lua_pushstring(L, msg);
    lua_setfield(L, -2, "message");
  }
  if (ss_error_isset(&r->err)) {
    ss_push_error_object(L, &r->err);
    lua_setfield(L, -2, "err");
  }
}

static int h_await_headers(lua_State *L) {
  handle *h = check_handle(L);
  lua_pushboolean(L, sse_client_await_headers(h->c, (long)luaL_checkinteger(L, 2), luaL_checknumber(L, 3)));
  return 1;
}

sse_client *ss_check_engine_client(lua_State *L, int idx) {
  handle *h = luaL_checkudata(L, idx, ENGINE_HANDLE_MT);
  if (!h->c) luaL_error(L, "the engine client is closed");
  return h->c;
}

void ss_push_engine_result(lua_State *L, sse_result *r) { push_result(L, r); }

/* h:take(id[, settle]) -> result | nil. settle: a table by transfer id of {method=, path=,
 * opts=} (each request as its caller wrote it, opts with ok and raw): a result whose id it
 * holds comes back settled as perform's are (engine_settle.c), with its id; any other raw. */
static int h_take(lua_State *L) {
  handle *h = check_handle(L);
  sse_result *r = sse_client_take(h->c, (long)luaL_optinteger(L, 2, 0));
  if (!r) return 0;
  int spec = 0;
  if (lua_istable(L, 3)) {
    lua_rawgeti(L, 3, (lua_Integer)r->id);
    if (lua_istable(L, -1)) spec = lua_gettop(L);
    else lua_pop(L, 1);
  }
  if (!spec) {
    push_result(L, r);
    sse_result_free(r);
    return 1;
  }
  ss_request req = {0};
  lua_getfield(L, spec, "method");
  req.method = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  lua_getfield(L, spec, "path");
  req.path = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  lua_getfield(L, spec, "opts");
  if (lua_istable(L, -1)) {
    int opts = lua_gettop(L);
    lua_getfield(L, opts, "raw");
    req.raw = lua_toboolean(L, -1);
    lua_getfield(L, opts, "ok");
    if (lua_istable(L, -1)) req.ok_idx = lua_gettop(L);
  }
  ss_push_settled(L, r, &req);
  lua_pushinteger(L, (lua_Integer)r->id);
  lua_setfield(L, -2, "id");
  sse_result_free(r);
  return 1;
}

/* core.engine_error(status, method, path[, message]) -> the error object of an answer nobody
 * accepted, as perform settles it (the one table of reasons: engine_settle.c). */
static int l_engine_error(lua_State *L) {
  ss_push_engine_error(L, (long)luaL_checkinteger(L, 1), luaL_optstring(L, 2, ""), luaL_optstring(L, 3, ""),
                       luaL_optstring(L, 4, NULL));
  return 1;
}

static int h_line(lua_State *L) {
  handle *h = check_handle(L);
  const char *line;
  size_t len;
  if (!sse_client_line(h->c, (long)luaL_checkinteger(L, 2), &line, &len)) return 0;
  lua_pushlstring(L, line, len);
  return 1;
}

static int h_state(lua_State *L) {
  handle *h = check_handle(L);
  sse_result *r = sse_client_peek(h->c, (long)luaL_checkinteger(L, 2));
  if (!r) return 0;
  lua_pushstring(L, r->done ? "done" : "running");
  if (!r->status) return 1;
  lua_pushinteger(L, (lua_Integer)r->status);
  return 2;
}

static int h_cancel(lua_State *L) {
  handle *h = check_handle(L);
  sse_client_cancel(h->c, (long)luaL_checkinteger(L, 2));
  return 0;
}

static int h_finished(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)sse_client_finished(check_handle(L)->c));
  return 1;
}

/* core.engine_clock() -> seconds on the monotonic clock (deadlines in engine.lua). */
static int l_engine_clock(lua_State *L) {
  lua_pushnumber(L, (lua_Number)ss_monotonic_now());
  return 1;
}

void sandstack_open_engine(lua_State *L, const luaL_Reg *more_methods) {
  static const luaL_Reg methods[] = {
      {"submit", h_submit}, {"run", h_run},       {"await_headers", h_await_headers},
      {"take", h_take},     {"line", h_line},     {"state", h_state},   {"cancel", h_cancel},
      {"finished", h_finished}, {"close", h_close}, {NULL, NULL},
  };
  ss_define_class(L, ENGINE_HANDLE_MT, methods, h_close);
  /* The methods of their own files (perform, exec), handed in: they call ss_check_engine_client
   * here, so this file names none of them. */
  luaL_getmetatable(L, ENGINE_HANDLE_MT);
  lua_getfield(L, -1, "__index");
  luaL_setfuncs(L, more_methods, 0);
  lua_pop(L, 2);
  static const luaL_Reg fns[] = {
      {"engine_client", l_engine_client},
      {"engine_clock", l_engine_clock},
      {"engine_error", l_engine_error},
      {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
