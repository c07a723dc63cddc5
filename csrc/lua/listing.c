/* The list helper's side in core.so (lua/sandstack/docker/list_helper.lua):
 *   core.list_program() -> the bytes of sandstack-list (csrc/list), included by the build
 *   core.list_parse(output, max_entries)
 *       -> { {name =, type = "file"|"directory"|"link"|"other", size =, mode =, mtime =, link =}, ... }
 *        | nil, err: "output_limit" (more than max_entries, or more than the helper writes),
 *          "io" with the errno name the helper met, "engine"/"bad_answer" for anything that is
 *          not the format (csrc/list/format.h): the output comes from a helper that read names
 *          a guest chose, so every count and byte is checked before it is used. */
#include <stdlib.h>
#include <string.h>

#include "list/format.h"
#include "lua/binding.h"
#include "lua/incbin.h"

#ifndef SANDSTACK_LIST_PATH
#error "SANDSTACK_LIST_PATH: the build passes the path of the sandstack-list program"
#endif

SS_INCBIN(ss_list_program, SANDSTACK_LIST_PATH);

static int l_list_program(lua_State *L) {
  lua_pushlstring(L, ss_list_program_start, (size_t)(ss_list_program_end - ss_list_program_start));
  return 1;
}

typedef struct {
  const char *p, *end;
} cursor;

/* A decimal (base 10) or octal (base 8) number ended by `stop`; 0 with *v set, -1 otherwise. */
static int number(cursor *c, int base, char stop, unsigned long long *v) {
  const char *start = c->p;
  *v = 0;
  while (c->p < c->end && *c->p >= '0' && *c->p < '0' + base) {
    if (*v > (1ull << 53) / (unsigned)base) return -1; /* past what a Lua number holds exactly */
    *v = *v * (unsigned)base + (unsigned)(*c->p++ - '0');
  }
  if (c->p == start || c->p == c->end || *c->p != stop) return -1;
  c->p++;
  return 0;
}

static int bad(lua_State *L, const char *what) {
  return ss_return_error(L, "engine", "bad_answer", "the list helper's output is malformed: %s", what);
}

static const char *type_name(char t) {
  return t == 'f' ? "file" : t == 'd' ? "directory" : t == 'l' ? "link" : t == 'o' ? "other" : NULL;
}

/* The last line: end/over with the count, or error with an errno name. */
static int last_line(lua_State *L, cursor *c, unsigned long long n, unsigned long long max) {
  size_t left = (size_t)(c->end - c->p);
  unsigned long long count;
  if (left > 4 && memcmp(c->p, "end ", 4) == 0) {
    c->p += 4;
    if (number(c, 10, '\n', &count) != 0 || count != n || c->p != c->end) return bad(L, "its end line");
    return 1;
  }
  if (left > 5 && memcmp(c->p, "over ", 5) == 0) {
    ss_error e;
    ss_error_init(&e);
    ss_error_set(&e, "output_limit", NULL, "the directory has more than %llu entries", n < max ? n : max);
    ss_error_field_num(&e, "limit", (double)max);
    return ss_push_error(L, &e);
  }
  if (left > 6 && memcmp(c->p, "error ", 6) == 0) {
    const char *name = c->p + 6;
    size_t k = 0;
    while (name + k < c->end && k < 32 && ((name[k] >= 'A' && name[k] <= 'Z') || (name[k] >= '0' && name[k] <= '9'))) k++;
    if (k == 0 || name + k + 1 != c->end || name[k] != '\n') return bad(L, "its error line");
    char ename[33];
    memcpy(ename, name, k);
    ename[k] = '\0';
    return ss_return_error(L, "io", ename, "%s", ename);
  }
  return bad(L, "its last line");
}

static int l_list_parse(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  lua_Integer max = luaL_checkinteger(L, 2);
  if (max < 1) return luaL_argerror(L, 2, "a positive count");
  cursor c = {s, s + len};
  size_t ml = sizeof SS_LIST_MAGIC - 1;
  if (len < ml || memcmp(s, SS_LIST_MAGIC, ml) != 0) return bad(L, "no header");
  c.p += ml;
  lua_newtable(L);
  unsigned long long n = 0;
  for (;;) {
    if (c.end - c.p < 2 || c.p[1] != ' ' || !type_name(c.p[0])) {
      int r = last_line(L, &c, n, (unsigned long long)max);
      return r == 1 ? 1 : r; /* the table, or nil, err */
    }
    const char *type = type_name(c.p[0]);
    c.p += 2;
    unsigned long long mode, size, mtime, nl, ll;
    if (number(&c, 8, ' ', &mode) != 0 || mode > 07777 || number(&c, 10, ' ', &size) != 0)
      return bad(L, "a record's numbers");
    int before_epoch = c.p < c.end && *c.p == '-'; /* a guest may set any time */
    c.p += before_epoch;
    if (number(&c, 10, ' ', &mtime) != 0 || number(&c, 10, ' ', &nl) != 0 || number(&c, 10, '\n', &ll) != 0)
      return bad(L, "a record's numbers");
    if (nl == 0 || nl > 255 || ll > 4095 || (unsigned long long)(c.end - c.p) < nl + ll + 1 || c.p[nl + ll] != '\n')
      return bad(L, "a record's lengths");
    if (memchr(c.p, '/', nl) || memchr(c.p, '\0', nl) || (nl == 1 && c.p[0] == '.') ||
        (nl == 2 && c.p[0] == '.' && c.p[1] == '.'))
      return bad(L, "a name");
    if (++n > (unsigned long long)max) {
      ss_error e;
      ss_error_init(&e);
      ss_error_set(&e, "output_limit", NULL, "the directory has more than %lld entries", (long long)max);
      ss_error_field_num(&e, "limit", (double)max);
      return ss_push_error(L, &e);
    }
    lua_createtable(L, 0, 6);
    lua_pushlstring(L, c.p, (size_t)nl);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, type);
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, (lua_Integer)mode);
    lua_setfield(L, -2, "mode");
    lua_pushinteger(L, before_epoch ? -(lua_Integer)mtime : (lua_Integer)mtime);
    lua_setfield(L, -2, "mtime");
    if (ll) {
      lua_pushlstring(L, c.p + nl, (size_t)ll);
      lua_setfield(L, -2, "link");
    }
    lua_rawseti(L, -2, (int)n);
    c.p += nl + ll + 1;
  }
}

void sandstack_open_listing(lua_State *L) {
  static const luaL_Reg fns[] = {{"list_program", l_list_program}, {"list_parse", l_list_parse}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
