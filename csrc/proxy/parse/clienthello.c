/* The ClientHello reader (RFC 8446 4.1.2, RFC 6066 3). */
#include "proxy/parse/clienthello.h"

#include <string.h>

enum {
  EXT_SERVER_NAME = 0x0000,
  EXT_ECH = 0xfe0d,  /* encrypted_client_hello (RFC 9849); GREASE ECH looks the same, by design */
  EXT_ESNI = 0xffce, /* encrypted_server_name (draft-ietf-tls-esni up to -02) */
};

typedef struct {
  const uint8_t *p;
  size_t n;
} cursor;

static int take(cursor *c, size_t k, const uint8_t **out) {
  if (c->n < k) return -1;
  if (out) *out = c->p;
  c->p += k;
  c->n -= k;
  return 0;
}

static int u8(cursor *c, size_t *v) {
  const uint8_t *b;
  if (take(c, 1, &b)) return -1;
  *v = b[0];
  return 0;
}

static int u16(cursor *c, size_t *v) {
  const uint8_t *b;
  if (take(c, 2, &b)) return -1;
  *v = (size_t)b[0] << 8 | b[1];
  return 0;
}

/* A length-prefixed vector (prefix of 1 or 2 bytes) as a sub-cursor. */
static int vec(cursor *c, int width, cursor *sub) {
  size_t len;
  if ((width == 1 ? u8(c, &len) : u16(c, &len)) != 0) return -1;
  sub->p = c->p;
  sub->n = len;
  return take(c, len, NULL);
}

/* server_name extension body -> the one host_name entry. */
static ch_status server_name(cursor ext, char *sni) {
  cursor list;
  if (vec(&ext, 2, &list) || ext.n != 0 || list.n == 0) return CH_MALFORMED;
  int found = 0;
  while (list.n) {
    size_t type;
    cursor name;
    if (u8(&list, &type) || vec(&list, 2, &name)) return CH_MALFORMED;
    if (type != 0) continue; /* other name types are not defined; skip as the RFC allows */
    if (found || name.n == 0 || name.n > CH_MAX_NAME) return CH_MALFORMED;
    for (size_t i = 0; i < name.n; i++) {
      uint8_t ch = name.p[i];
      if (ch >= 'A' && ch <= 'Z') ch = (uint8_t)(ch + 32);
      if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_'))
        return CH_MALFORMED; /* NUL, blanks, bytes >= 0x80: a name nobody could compare */
      sni[i] = (char)ch;
    }
    sni[name.n] = '\0';
    found = 1;
  }
  return found ? CH_SNI : CH_NO_SNI;
}

static ch_status hello_body(cursor c, char *sni) {
  cursor skip;
  size_t version;
  if (u16(&c, &version) || (version >> 8) != 3) return CH_MALFORMED;
  if (take(&c, 32, NULL)) return CH_MALFORMED; /* random */
  if (vec(&c, 1, &skip) || skip.n > 32) return CH_MALFORMED; /* legacy_session_id */
  if (vec(&c, 2, &skip) || skip.n < 2 || skip.n % 2) return CH_MALFORMED; /* cipher_suites */
  if (vec(&c, 1, &skip) || skip.n < 1) return CH_MALFORMED; /* compression methods */
  if (c.n == 0) return CH_NO_SNI; /* no extensions at all */
  cursor exts;
  if (vec(&c, 2, &exts) || c.n != 0) return CH_MALFORMED;
  ch_status result = CH_NO_SNI;
  int seen_sni = 0, seen_ech = 0, seen_esni = 0;
  while (exts.n) {
    size_t type;
    cursor body;
    if (u16(&exts, &type) || vec(&exts, 2, &body)) return CH_MALFORMED;
    /* a repeated extension is illegal (RFC 8446 4.2) */
    if (type == EXT_ECH && seen_ech++) return CH_MALFORMED;
    if (type == EXT_ESNI && seen_esni++) return CH_MALFORMED;
    if (type != EXT_SERVER_NAME) continue;
    if (seen_sni++) return CH_MALFORMED;
    result = server_name(body, sni);
    if (result == CH_MALFORMED) return result;
  }
  /* the whole hello is read first, so a malformed extension after these still decides */
  if (seen_ech) return CH_ECH;
  if (seen_esni) return CH_ESNI;
  return result;
}

ch_status ch_parse(const uint8_t *buf, size_t len, uint8_t *scratch, char sni[CH_MAX_NAME + 1]) {
  if (len == 0) return CH_NEED_MORE;
  /* change_cipher_spec, alert, application_data, heartbeat: a TLS record, but a client's first
     flight starts with its ClientHello; servers that skip such a record (a warning alert) would
     read a hello this reader never saw */
  if (buf[0] >= 0x14 && buf[0] <= 0x18 && buf[0] != 0x16) return CH_MALFORMED;
  if (buf[0] != 0x16) return CH_NOT_TLS;
  size_t have = 0, pos = 0;
  /* reassemble handshake bytes from consecutive handshake records */
  while (pos < len) {
    if (len - pos < 5) return CH_NEED_MORE;
    const uint8_t *r = buf + pos;
    if (r[0] != 0x16) return CH_MALFORMED; /* an interleaved record before the hello ended */
    if (r[1] != 3) return CH_MALFORMED;
    size_t rlen = (size_t)r[3] << 8 | r[4];
    if (rlen == 0 || rlen > 16384) return CH_MALFORMED;
    size_t avail = len - pos - 5 < rlen ? len - pos - 5 : rlen;
    if (have + avail > CH_MAX_HELLO) return CH_MALFORMED;
    size_t record_end = have + rlen; /* handshake bytes once this record is complete */
    memcpy(scratch + have, r + 5, avail);
    have += avail;
    if (have >= 4) {
      if (scratch[0] != 1) return CH_MALFORMED; /* not a ClientHello */
      size_t mlen = (size_t)scratch[1] << 16 | (size_t)scratch[2] << 8 | scratch[3];
      if (mlen + 4 > CH_MAX_HELLO || mlen < 38) return CH_MALFORMED;
      /* the hello must end where a record ends: more handshake bytes in its last record would
         be a second message coalesced into it, which a client does not send before the answer.
         Decided from the record header, so a prefix never answers otherwise than the whole. */
      if (record_end > mlen + 4) return CH_MALFORMED;
      if (have == mlen + 4) {
        cursor c = {scratch + 4, mlen};
        return hello_body(c, sni);
      }
    }
    if (avail < rlen) return CH_NEED_MORE;
    pos += 5 + rlen;
  }
  return CH_NEED_MORE;
}
