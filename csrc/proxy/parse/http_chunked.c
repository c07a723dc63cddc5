/* The chunked-coding validator (see http_chunked.h for the rules and why they are strict). */
#include "proxy/parse/http_chunked.h"

#include <string.h>

enum {
  S_SIZE,        /* hex digits of a chunk size */
  S_EXT,         /* after ';': the extension up to CR */
  S_SIZE_LF,     /* the LF after a size line's CR */
  S_DATA,        /* chunk data */
  S_DATA_CR,     /* the CR after chunk data */
  S_DATA_LF,     /* its LF */
  S_TRAILER,     /* start of a trailer line, or the final CRLF */
  S_TRAILER_TXT, /* inside a trailer line */
  S_TRAILER_LF,  /* the LF ending a trailer line */
  S_FINAL_LF,    /* the LF of the final CRLF */
  S_END,
  S_BAD,
};

void hc_init(hc_decoder *d, hc_mode mode) {
  d->mode = mode;
  d->state = S_SIZE;
  d->left = 0;
  d->line = 0;
  d->digits = 0;
  d->why = NULL;
}

static int hex(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int ext_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c < 0x7f); }

static size_t bad(hc_decoder *d, const char *why, size_t at, hc_result *res) {
  d->state = S_BAD;
  d->why = why;
  *res = HC_BAD;
  return at;
}

/* the size line ended (its CRLF read): data follows, or the last chunk's trailer section */
static void size_done(hc_decoder *d) {
  d->line = 0;
  d->digits = 0;
  d->state = d->left ? S_DATA : S_TRAILER;
}

/* hc_feed, and when out is not NULL the chunk data bytes copied to out (*out_len of them) */
static size_t feed(hc_decoder *d, const char *data, size_t n, hc_result *res, char *out, size_t *out_len) {
  *res = HC_MORE;
  if (d->state == S_END) return *res = HC_END, 0;
  if (d->state == S_BAD) return *res = HC_BAD, 0;
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)data[i];
    if (d->state == S_DATA) { /* the bulk of a body: skipped, not inspected */
      size_t take = n - i;
      if (take > d->left) take = (size_t)d->left;
      if (out) memcpy(out + *out_len, data + i, take), *out_len += take;
      d->left -= take;
      i += take;
      if (!d->left) d->state = S_DATA_CR;
      continue;
    }
    if (d->state == S_SIZE || d->state == S_EXT || d->state == S_TRAILER_TXT) {
      if (++d->line > HC_MAX_LINE) return bad(d, "a chunk-size or trailer line is too long", i, res);
    }
    switch (d->state) {
    case S_SIZE: {
      int v = hex(c);
      if (v >= 0) {
        if (++d->digits > HC_MAX_SIZE_DIGITS) return bad(d, "a chunk size has too many digits", i, res);
        d->left = d->left * 16 + (unsigned)v;
      } else if (d->digits && c == ';') {
        d->state = S_EXT;
      } else if (d->digits && c == '\r') {
        d->state = S_SIZE_LF;
      } else {
        return bad(d, "a chunk size is not hex digits ending in CRLF", i, res);
      }
      break;
    }
    case S_EXT:
      if (c == '\r') d->state = S_SIZE_LF;
      else if (!ext_byte(c)) return bad(d, "a chunk extension holds a control byte", i, res);
      break;
    case S_SIZE_LF:
      if (c != '\n') return bad(d, "a chunk-size line does not end in CRLF", i, res);
      size_done(d);
      break;
    case S_DATA_CR:
      if (c != '\r') return bad(d, "chunk data is longer than its size", i, res);
      d->state = S_DATA_LF;
      break;
    case S_DATA_LF:
      if (c != '\n') return bad(d, "chunk data is not followed by CRLF", i, res);
      d->state = S_SIZE;
      break;
    case S_TRAILER:
      if (c == '\r') {
        d->state = S_FINAL_LF;
      } else if (d->mode == HC_REQUEST) {
        return bad(d, "trailer fields in a request are not accepted", i, res);
      } else if (c == '\n' || !ext_byte(c)) {
        return bad(d, "a trailer line holds a control byte", i, res);
      } else {
        d->line = 1;
        d->state = S_TRAILER_TXT;
      }
      break;
    case S_TRAILER_TXT:
      if (c == '\r') d->state = S_TRAILER_LF;
      else if (!ext_byte(c)) return bad(d, "a trailer line holds a control byte", i, res);
      break;
    case S_TRAILER_LF:
      if (c != '\n') return bad(d, "a trailer line does not end in CRLF", i, res);
      d->line = 0;
      d->state = S_TRAILER;
      break;
    case S_FINAL_LF:
      if (c != '\n') return bad(d, "a chunked body does not end in CRLF", i, res);
      d->state = S_END;
      *res = HC_END;
      return i + 1;
    }
    i++;
  }
  return n;
}

size_t hc_feed(hc_decoder *d, const char *data, size_t n, hc_result *res) { return feed(d, data, n, res, NULL, NULL); }

size_t hc_feed_data(hc_decoder *d, const char *data, size_t n, hc_result *res, char *out, size_t *out_len) {
  *out_len = 0;
  return feed(d, data, n, res, out, out_len);
}
