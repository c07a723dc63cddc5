/* The binding of the hijacked connection (csrc/engine/attach.c) and of a streaming frame
 * reader over the demultiplexer (csrc/engine/demux.c), for sandstack.docker.process:
 *   core.engine_attach(cfg, method, target, body, timeout) -> conn | nil, err
 *       cfg as core.engine_client's {host=, tls=, tls_verify=, ca=, cert=, key=}
 *   conn:send(bytes, timeout) -> true | nil, err
 *   conn:recv(timeout) -> bytes | nil, "timeout" | nil, "eof" | nil, err
 *   conn:shutdown() -> true | nil, err      (the write half: stdin's end)
 *   conn:fd() -> integer   conn:buffered() -> integer   conn:close()  (idempotent; __gc, __close)
 *   core.frame_reader() -> fr
 *   fr:feed(bytes) -> {stream, bytes, stream, bytes, ...} | nil, err   (stream 1 out, 2 err)
 *   fr:partial() -> true when the bytes fed end inside a frame
 * A refusal (any answer but 101/200) is the engine error call() gives for that status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/attach.h"
#include "lua/binding.h"
#include "lua/engine_handle.h"

#define ATTACH_MT "sandstack.engine.attach"
#define FRAMES_MT "sandstack.engine.frames"
/* One read: larger than a TLS record (16 KiB), so no decrypted bytes stay behind in OpenSSL
 * where poll(2) on the socket would not see them. */
#define RECV_CHUNK (64 * 1024)

typedef struct {
  sse_attach *a;
  char *buf; /* RECV_CHUNK bytes, one per connection */
} conn;

static conn *open_conn(lua_State *L) {
  conn *c = luaL_checkudata(L, 1, ATTACH_MT);
  if (!c->a) luaL_error(L, "the process connection is closed");
  return c;
}

static int c_close(lua_State *L) {
  conn *c = luaL_checkudata(L, 1, ATTACH_MT);
  sse_attach_free(c->a);
  c->a = NULL;
  free(c->buf);
  c->buf = NULL;
  return 0;
}

static double opt_timeout(lua_State *L, int idx) {
  double t = luaL_optnumber(L, idx, 0);
  return t > 0 ? t : 0;
}

static int c_send(lua_State *L) {
  conn *c = open_conn(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  ss_error err;
  ss_error_init(&err);
  if (sse_attach_send(c->a, p, n, opt_timeout(L, 3), &err) != 0) return ss_push_error(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int c_recv(lua_State *L) {
  conn *c = open_conn(L);
  double timeout = opt_timeout(L, 2);
  ss_error err;
  ss_error_init(&err);
  ssize_t got = sse_attach_recv(c->a, c->buf, RECV_CHUNK, timeout, &err);
  if (got > 0) {
    lua_pushlstring(L, c->buf, (size_t)got);
    return 1;
  }
  if (got == -1) return ss_push_error(L, &err);
  lua_pushnil(L);
  lua_pushstring(L, got == 0 ? "eof" : "timeout");
  return 2;
}

static int c_shutdown(lua_State *L) {
  conn *c = open_conn(L);
  ss_error err;
  ss_error_init(&err);
  if (sse_attach_shutdown_write(c->a, &err) != 0) return ss_push_error(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int c_fd(lua_State *L) {
  lua_pushinteger(L, sse_attach_fd(open_conn(L)->a));
  return 1;
}

static int c_buffered(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)sse_attach_buffered(open_conn(L)->a));
  return 1;
}

static int l_engine_attach(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const keys[] = {"host", "tls", "tls_verify", "ca", "cert", "key", NULL};
  ss_check_keys(L, 1, keys, "engine_attach");
  const char *method = luaL_checkstring(L, 2);
  const char *target = luaL_checkstring(L, 3);
  size_t body_len = 0;
  const char *body = luaL_optlstring(L, 4, NULL, &body_len);
  double timeout = luaL_checknumber(L, 5);
  sse_config cfg = {
      .host = ss_opt_string(L, 1, "host", NULL),
      .tls = ss_opt_boolean(L, 1, "tls", 0),
      .tls_verify = ss_opt_boolean(L, 1, "tls_verify", 1),
      .ca = ss_opt_string(L, 1, "ca", NULL),
      .cert = ss_opt_string(L, 1, "cert", NULL),
      .key = ss_opt_string(L, 1, "key", NULL),
  };
  if (!cfg.host) luaL_error(L, "engine_attach: cfg.host is required");
  conn *c = ss_newuserdata(L, sizeof *c);
  c->a = NULL;
  c->buf = NULL;
  luaL_getmetatable(L, ATTACH_MT);
  lua_setmetatable(L, -2);
  ss_error err;
  ss_error_init(&err);
  c->buf = malloc(RECV_CHUNK);
  if (!c->buf) return ss_return_error(L, "transport", "nomem", "out of memory");
  sse_attach_refusal refusal;
  c->a = sse_attach_open(&cfg, method, target, body, body_len, timeout, &refusal, &err);
  if (c->a) return 1;
  if (refusal.status) {
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(target, "?"), target);
    lua_pushnil(L);
    ss_push_engine_error(L, refusal.status, method, path, refusal.message);
    return 2;
  }
  return ss_push_error(L, &err);
}

typedef struct {
  sse_demux d;
  int live;
} frames;

static frames *check_frames(lua_State *L) { return luaL_checkudata(L, 1, FRAMES_MT); }

static int f_close(lua_State *L) {
  frames *f = check_frames(L);
  if (f->live) sse_demux_free(&f->d);
  f->live = 0;
  return 0;
}

/* Appends the piece the demultiplexer holds (at most one side is non-empty after a span). */
static void take_piece(lua_State *L, frames *f, int list, int *n) {
  ss_buf *sides[2] = {&f->d.out, &f->d.err};
  for (int s = 0; s < 2; s++) {
    ss_buf *b = sides[s];
    if (!b->len) continue;
    lua_pushinteger(L, s + 1);
    lua_rawseti(L, list, ++*n);
    lua_pushlstring(L, b->data, b->len);
    lua_rawseti(L, list, ++*n);
    ss_buf_consume(b, b->len);
  }
  f->d.used = 0; /* the budget bounds what is held, and nothing is held now */
}

static int f_feed(lua_State *L) {
  frames *f = check_frames(L);
  if (!f->live) luaL_error(L, "the frame reader is closed");
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  lua_newtable(L);
  int list = lua_gettop(L), count = 0;
  while (n > 0) {
    size_t k = sse_demux_span(&f->d, n);
    int st = sse_demux_feed(&f->d, p, k);
    if (st != SSE_DEMUX_OK)
      return ss_return_error(L, "transport", "bad_stream", "the output is not a framed stdout/stderr stream");
    p += k;
    n -= k;
    take_piece(L, f, list, &count);
  }
  return 1;
}

static int f_partial(lua_State *L) {
  frames *f = check_frames(L);
  lua_pushboolean(L, f->live && sse_demux_finish(&f->d) == SSE_DEMUX_TRUNCATED);
  return 1;
}

static int l_frame_reader(lua_State *L) {
  frames *f = ss_newuserdata(L, sizeof *f);
  sse_demux_init(&f->d, (size_t)1 << 30); /* per piece: a frame's payload is held until taken */
  f->live = 1;
  luaL_getmetatable(L, FRAMES_MT);
  lua_setmetatable(L, -2);
  return 1;
}

void sandstack_open_engine_attach(lua_State *L) {
  static const luaL_Reg conn_methods[] = {{"send", c_send}, {"recv", c_recv}, {"shutdown", c_shutdown},
                                          {"fd", c_fd},     {"buffered", c_buffered}, {"close", c_close},
                                          {NULL, NULL}};
  ss_define_class(L, ATTACH_MT, conn_methods, c_close);
  static const luaL_Reg frame_methods[] = {{"feed", f_feed}, {"partial", f_partial}, {"close", f_close}, {NULL, NULL}};
  ss_define_class(L, FRAMES_MT, frame_methods, f_close);
  static const luaL_Reg fns[] = {{"engine_attach", l_engine_attach}, {"frame_reader", l_frame_reader}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
