/* libFuzzer target for the ClientHello/SNI reader (csrc/proxy/parse/clienthello.c). Checks: no
 * crash or out-of-bounds read; a name is returned only as CH_SNI and is 1..255 bytes of
 * [a-z0-9._-]; every prefix of an input that yields an answer yields CH_NEED_MORE or the same
 * answer (a longer read never contradicts a shorter one that already decided), and a decided
 * prefix decides identically when more bytes follow; a TLS record of another type first (an
 * alert before the hello) is never read as anything but CH_MALFORMED; CH_ECH and CH_ESNI are
 * answered only when the input holds that extension's type. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/parse/clienthello.h"

static uint8_t scratch[CH_MAX_HELLO];

static int has_pair(const uint8_t *d, size_t n, uint8_t a, uint8_t b) {
  for (size_t i = 0; i + 1 < n; i++)
    if (d[i] == a && d[i + 1] == b) return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char sni[CH_MAX_NAME + 1], first_sni[CH_MAX_NAME + 1];
  ch_status whole = ch_parse(data, size, scratch, sni);
  if (size > 0 && data[0] >= 0x14 && data[0] <= 0x18 && data[0] != 0x16 && whole != CH_MALFORMED) abort();
  if (whole == CH_ECH && !has_pair(data, size, 0xfe, 0x0d)) abort();
  if (whole == CH_ESNI && !has_pair(data, size, 0xff, 0xce)) abort();
  if (whole == CH_SNI) {
    size_t l = strlen(sni);
    if (l == 0 || l > CH_MAX_NAME || strspn(sni, "abcdefghijklmnopqrstuvwxyz0123456789._-") != l) abort();
  }
  /* the first prefix that decides must decide as the whole input does */
  for (size_t k = 0; k <= size; k++) {
    ch_status st = ch_parse(data, k, scratch, first_sni);
    if (st == CH_NEED_MORE) continue;
    if (st != whole) abort();
    if (st == CH_SNI && strcmp(first_sni, sni) != 0) abort();
    break;
  }
  return 0;
}
