#ifndef SANDSTACK_PROXY_CLIENTHELLO_H
#define SANDSTACK_PROXY_CLIENTHELLO_H
/* Reads the server name (SNI) from the first bytes a client sends into a CONNECT tunnel: the
 * TLS ClientHello, possibly split over several handshake records. A pure function over the
 * bytes received so far, so the fuzz target links exactly what the proxy runs. Anything it
 * cannot read with certainty is CH_MALFORMED: the tunnel is refused rather than guessed at. */
#include <stddef.h>
#include <stdint.h>

#define CH_MAX_HELLO 32768 /* handshake bytes we are willing to buffer (hellos are ~0.5-2 KiB) */
#define CH_MAX_NAME 255

typedef enum {
  CH_NEED_MORE = 0, /* a valid prefix: read more */
  CH_NOT_TLS,       /* the first byte is not a TLS record */
  CH_MALFORMED,     /* TLS, but not a ClientHello we can read (or larger than CH_MAX_HELLO), or a
                       record of another type (an alert...) before it */
  CH_NO_SNI,        /* a complete ClientHello without a host_name server_name */
  CH_SNI,           /* a complete ClientHello; the name is in sni (lowercased, NUL-terminated) */
  CH_ECH,           /* a complete ClientHello offering Encrypted Client Hello (0xfe0d): the name
                       in its SNI is only the outer one, the server may serve a hidden inner name */
  CH_ESNI,          /* the same with the draft Encrypted SNI extension (0xffce) */
} ch_status;

/* scratch: CH_MAX_HELLO bytes where the handshake message is reassembled from its records. */
ch_status ch_parse(const uint8_t *buf, size_t len, uint8_t *scratch, char sni[CH_MAX_NAME + 1]);

#endif
