#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_proxy_events (csrc/fuzz/corpus/fuzz_proxy_events/): each route
walked to its end, and reproductions of the proxy bugs this target exists for, as event sequences.

    python3 csrc/fuzz/events/seeds.py [OUT_DIR]

Input layout (csrc/fuzz/fuzz_proxy_events.c): template, body size, rare conditions, then one byte
per event, high nibble the kind and low nibble its size or variant."""
import os
import struct
import sys

TOKEN = b"tok-fuzz-events-0123456789"

# templates (TEMPLATES[] in fuzz_proxy_events.c)
T_TUNNEL, T_TUNNEL_EARLY, T_TUNNEL_BADSNI, T_INSPECT_POST, T_INSPECT_EARLY, T_INSPECT_DENY, T_INSPECT_ROGUE = range(7)
T_FORWARD_POST, T_FORWARD_DENY, T_CRED, T_CRED_NOTOKEN, T_RAW, T_DENIED, T_BADAUTH, T_SCRIPT, T_FORWARD_GET = range(7, 16)

# sizes: the low nibble of a sending event (SIZES[] in fuzz_proxy_events.c)
S1, S100, S4096, S65536, ALL = 0, 7, 10, 13, 15


def client_send(n=ALL): return bytes([0x00 | n])
def upstream_send(n=ALL): return bytes([0x10 | n])
def client_tls(n=ALL): return bytes([0x20 | n])
def origin_answer(n=14): return bytes([0x30 | n])
ORIGIN_CLOSE_NOTIFY = b"\x3f"
CLIENT_EOF, CLIENT_ABANDON, CLIENT_RESET = b"\x40", b"\x46", b"\x4c"
UPSTREAM_EOF, UPSTREAM_ABANDON, UPSTREAM_RESET = b"\x50", b"\x56", b"\x5c"
CONNECT_OK, CONNECT_REFUSED = b"\x60", b"\x61"
RESOLVE, RESOLVE_BOTH, RESOLVE_V6, RESOLVE_PRIVATE, RESOLVE_MIXED, RESOLVE_MAPPED, RESOLVE_NONE, RESOLVE_FAIL = (
    b"\x70", b"\x78", b"\x79", b"\x7a", b"\x7b", b"\x7c", b"\x7d", b"\x7e")
WRITABLE_CLIENT, WRITABLE_UPSTREAM = b"\x80", b"\x81"
STALL_CLIENT, STALL_UPSTREAM = b"\x90", b"\x91"
NEXT = b"\xa0"
TIMER = b"\xb0"
CURL_PULL, CURL_PULL_ALL, CURL_STATUS, CURL_HEADER, CURL_END_HEAD = b"\xc1", b"\xc3", b"\xc4", b"\xc6", b"\xc7"
CURL_BODY, CURL_BODY_BIG, CURL_DONE, CURL_ERROR, CURL_TIMEOUT, CURL_100 = b"\xc8", b"\xca", b"\xcb", b"\xcc", b"\xcd", b"\xce"
SIGTERM, CLIENT_WRITE_ERROR, UPSTREAM_WRITE_ERROR, CLIENT_CLOSE_NOTIFY = b"\xf0", b"\xf6", b"\xf9", b"\xfc"
SET_POLICY = b"\xf5"  # the host's set-egress of the start policy: every allow-once grant taken back
# the ask mode (bit 3 of the body byte): the policy asks, and the last kind's 12-15 answer instead
ASK = 8
T_ASK_FORWARD = T_FORWARD_DENY  # template 8 in the ask mode: a POST to ask.test, which no rule names
ASK_ALLOW, ASK_ALLOW_SESSION, ASK_DENY, ASK_GONE = b"\xfc", b"\xfd", b"\xfe", b"\xff"
# in the ask mode, CONNECTs to askcred.test (a credential's host no rule names: inspected once allowed):
# 5 a request to it, 2 a ClientHello naming api.test, 13 a request with Host: api.test
T_ASK_INSPECT, T_ASK_INSPECT_BADSNI, T_ASK_INSPECT_BADHOST = T_INSPECT_DENY, T_TUNNEL_BADSNI, T_BADAUTH


def framed(lead, data):
    """bytes of the seed's own behind an event byte, in pieces of at most 255 (a length byte each)"""
    out = b""
    for i in range(0, len(data), 255):
        part = data[i:i + 255]
        out += lead + bytes([len(part)]) + part
    return out


def raw_client(data): return framed(b"\xd0", data)
def tls_client(data): return framed(b"\xd8", data)  # plaintext through the client's TLS session
def raw_upstream(data): return framed(b"\xe0", data)
def tls_origin(data): return framed(b"\xe8", data)  # plaintext through the destination's TLS session


def seed(template, body=0, rare=0, *events):
    return bytes([template, body, rare]) + b"".join(events)


def client_hello(sni, extra_exts=b""):
    """A TLS 1.2-framed ClientHello with SNI and any extra extensions (type, body) pairs."""
    host = sni.encode()
    sni_body = struct.pack(">HBH", len(host) + 3, 0, len(host)) + host
    exts = struct.pack(">HH", 0, len(sni_body)) + sni_body + extra_exts
    body = b"\x03\x03" + b"\x11" * 32 + b"\x00" + struct.pack(">H", 2) + b"\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def ext(kind, data): return struct.pack(">HH", kind, len(data)) + data


AUTH = b"Proxy-Authorization: Bearer " + TOKEN + b"\r\n"

# a full exchange after the head and the connect: the client's TLS, the origin's, the answer, the ends
TLS_EXCHANGE = (NEXT + client_send() + upstream_send() + NEXT + client_send() + client_tls() + client_send()
                + upstream_send() + NEXT + origin_answer() + upstream_send() + ORIGIN_CLOSE_NOTIFY + upstream_send()
                + UPSTREAM_EOF + upstream_send() + NEXT + client_send() + CLIENT_EOF + client_send() + NEXT + TIMER)

SEEDS = {
    # the inspected request's head and body records in ONE read while the origin's
    # handshake is pending; the origin's flight comes after: the head goes out from a grown buffer
    "review1_uaf_head_body_one_read": seed(
        T_INSPECT_POST, 5, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_tls(S100), client_tls(),
        client_send(), NEXT, upstream_send(), NEXT, origin_answer(), upstream_send(), UPSTREAM_EOF, upstream_send(), NEXT,
        client_send(), NEXT, TIMER),
    "review1_uaf_big_body": seed(
        T_INSPECT_POST, 7, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_tls(S100), client_tls(),
        client_send(S65536), NEXT, upstream_send(), NEXT, client_send(), client_send(), origin_answer(), upstream_send(),
        NEXT, TIMER),
    "review1_uaf_tls12": seed(
        T_INSPECT_POST, 6, 3, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_send(), upstream_send(),
        NEXT, client_send(), client_tls(S100), client_tls(), client_send(), upstream_send(), NEXT, upstream_send(), NEXT,
        origin_answer(), upstream_send(), NEXT, TIMER),
    "inspect_get_early_hello": seed(T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, TLS_EXCHANGE),
    "inspect_post_origin_first": seed(
        T_INSPECT_POST, 3, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, upstream_send(), client_send(), upstream_send(),
        NEXT, client_tls(), client_send(), NEXT, origin_answer(), upstream_send(), NEXT, TIMER),
    "inspect_denied": seed(T_INSPECT_DENY, 2, 0, client_send(), RESOLVE, CONNECT_OK, TLS_EXCHANGE),
    "inspect_untrusted_origin": seed(T_INSPECT_ROGUE, 2, 0, client_send(), RESOLVE, CONNECT_OK, TLS_EXCHANGE),
    "inspect_client_leaves_mid_body": seed(
        T_INSPECT_POST, 6, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_tls(S100), client_send(),
        upstream_send(), NEXT, upstream_send(), client_tls(S4096), client_send(), CLIENT_EOF, client_send(), NEXT, TIMER),
    "inspect_client_cuts_a_record_waiting_origin": seed(
        T_INSPECT_POST, 6, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_tls(S100), client_tls(),
        client_send(S4096), CLIENT_ABANDON, client_send(), NEXT, upstream_send(), NEXT, TIMER),
    "tunnel_destination_leaves_before_hello": seed(
        T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, UPSTREAM_EOF, upstream_send(), NEXT, TIMER),
    "forward_client_leaves_mid_body": seed(
        T_FORWARD_POST, 6, 0, client_send(S4096), RESOLVE, CONNECT_OK, NEXT, client_send(S4096), CLIENT_ABANDON,
        client_send(), NEXT, origin_answer(), upstream_send(), NEXT, TIMER),
    "inspect_deadline_waiting_origin": seed(
        T_INSPECT_POST, 2, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_tls(), client_send(), TIMER,
        NEXT, TIMER),
    "inspect_answer_backpressure": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        client_send(), client_tls(), client_send(), upstream_send(), STALL_CLIENT, origin_answer(13), upstream_send(),
        upstream_send(), WRITABLE_CLIENT, NEXT, upstream_send(), NEXT, TIMER),
    "inspect_inner_chunked": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        client_send(), NEXT, TIMER),
    "inspect_inner_absolute_form": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"GET http://evil.test/v1/x HTTP/1.1\r\nHost: api.test\r\n\r\n"), client_send(), NEXT, TIMER),
    "inspect_inner_host_mismatch": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"GET /v1/x HTTP/1.1\r\nHost: evil.test\r\n\r\n"), client_send(), NEXT, TIMER),
    "inspect_inner_override_header": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"GET /v1/x HTTP/1.1\r\nHost: api.test\r\nX-HTTP-Method-Override: DELETE\r\n\r\n"), client_send(),
        upstream_send(), NEXT, TIMER),
    # keep-alive. Each request is checked on its own, and only after the answer to the one before
    # ended in a way that allows another (the destination's answers here are the seed's own)
    "inspect_keepalive_pipelined": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"GET /v1/a HTTP/1.1\r\nHost: api.test\r\n\r\nPOST /up HTTP/1.1\r\nHost: api.test\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /v1/c HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        client_send(), upstream_send(), NEXT, tls_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        upstream_send(), NEXT, client_send(), upstream_send(), NEXT,
        tls_origin(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
        upstream_send(), NEXT, client_send(), upstream_send(), NEXT, TIMER),
    "inspect_keepalive_refused_second": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"GET /v1/a HTTP/1.1\r\nHost: api.test\r\n\r\nDELETE /up HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        client_send(), upstream_send(), NEXT, tls_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        upstream_send(), NEXT, client_send(), upstream_send(), NEXT, TIMER),
    "inspect_keepalive_smuggled_after_chunks": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"10000000000000005\r\nhello\r\n0\r\n\r\nDELETE /up HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        client_send(), upstream_send(), NEXT, TIMER),
    "inspect_keepalive_close_answer": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        client_send(), client_tls(), client_send(), upstream_send(), origin_answer(13), upstream_send(), NEXT,
        client_send(), upstream_send(), NEXT, TIMER),
    # CL.0: a GET (or any request) with a body; an origin that ignores it would read the body as the
    # next request (here a DELETE the policy refuses). After a body the connection is not reused.
    "review9_cl0_get_body": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"GET /v1/a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 39\r\n\r\nDELETE /up HTTP/1.1\r\nHost: api.test\r\n\r\n"
                   b"GET /v1/c HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        client_send(), upstream_send(), NEXT, tls_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        upstream_send(), NEXT, client_send(), upstream_send(), NEXT, TIMER),
    "review9_cl0_post_then_get": seed(
        T_INSPECT_POST, 2, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        client_send(), client_tls(), client_send(), upstream_send(), NEXT,
        tls_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), upstream_send(), NEXT, client_send(),
        upstream_send(), NEXT, TIMER),
    # api.test has a credential (X-Key): its answers are scrubbed as messages. The secret split by a
    # chunk boundary; an encoded answer (refused, 502); a placeholder split across request chunks.
    "review9_scrub_chunk_split": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        client_tls(), client_send(), upstream_send(), NEXT,
        tls_origin(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\napi-secre\r\n"
                   b"11\r\nt-fuzz-0123456789\r\n0\r\n\r\n"),
        upstream_send(), NEXT, client_send(), TIMER),
    "review9_scrub_encoded": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        client_tls(), client_send(), upstream_send(), NEXT,
        tls_origin(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x08\x00"),
        upstream_send(), NEXT, client_send(), TIMER),
    "review9_placeholder_split_chunks": seed(
        T_INSPECT_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), NEXT,
        tls_client(b"POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"8\r\nPHapiAAA\r\n12\r\nAAAAAAAAAAAAAAAAAA\r\n0\r\n\r\n"),
        client_send(), upstream_send(), NEXT, client_send(), TIMER),
    "tunnel": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_OK, TLS_EXCHANGE),
    "tunnel_destination_speaks_first": seed(
        T_SCRIPT, 0, 0, raw_client(b"CONNECT open.test:25 HTTP/1.1\r\n" + AUTH + b"\r\n"), client_send(), RESOLVE,
        CONNECT_OK, NEXT, raw_upstream(b"220 smtp.open.test ESMTP\r\n"), upstream_send(), raw_client(b"EHLO x\r\n"),
        client_send(), NEXT, TIMER),
    "connect_fails_at_once": seed(T_TUNNEL, 0, 0xe0, client_send(), RESOLVE, NEXT, TIMER),
    "accept_fails": seed(T_TUNNEL, 0, 0xf8, client_send(), NEXT, TIMER),
    "tunnel_early_hello": seed(T_TUNNEL_EARLY, 0, 0, client_send(), RESOLVE, CONNECT_OK, TLS_EXCHANGE),
    "tunnel_hello_in_pieces": seed(
        T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(S1), client_send(S100), client_send(),
        upstream_send(), client_send(), TLS_EXCHANGE),
    "tunnel_sni_mismatch": seed(T_TUNNEL_BADSNI, 0, 0, client_send(), RESOLVE, CONNECT_OK, TLS_EXCHANGE),
    "tunnel_backpressure": seed(
        T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), client_send(),
        STALL_CLIENT, raw_upstream(b"x" * 5000), upstream_send(), upstream_send(), WRITABLE_CLIENT, NEXT,
        upstream_send(), NEXT, TIMER),
    "forward_answer_backpressure": seed(
        T_FORWARD_GET, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, STALL_CLIENT, origin_answer(13), upstream_send(),
        upstream_send(), WRITABLE_CLIENT, NEXT, upstream_send(), UPSTREAM_EOF, upstream_send(), NEXT, TIMER),
    "connect_denied": seed(T_DENIED, 0, 0, client_send(), NEXT, client_send(), NEXT, TIMER),
    "connect_bad_token": seed(T_BADAUTH, 0, 0, client_send(), NEXT, TIMER),
    "connect_resolves_private": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE_PRIVATE, NEXT, TIMER),
    "connect_resolves_mapped": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE_MAPPED, NEXT, TIMER),
    "connect_resolves_mixed": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE_MIXED, NEXT, TIMER),
    "connect_refused": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_REFUSED, NEXT, TIMER),
    "connect_cancelled_by_deadline": seed(T_TUNNEL, 0, 4, client_send(), TIMER, RESOLVE, NEXT),
    "client_leaves_while_resolving": seed(T_FORWARD_POST, 3, 0, client_send(), CLIENT_EOF, client_send(), NEXT, RESOLVE),
    "forward_post": seed(
        T_FORWARD_POST, 3, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, WRITABLE_UPSTREAM, origin_answer(),
        upstream_send(), UPSTREAM_EOF, upstream_send(), NEXT, TIMER),
    "forward_body_in_pieces_backpressure": seed(
        T_FORWARD_POST, 7, 0, client_send(S4096), RESOLVE, CONNECT_OK, NEXT, STALL_UPSTREAM, client_send(S65536),
        client_send(S65536), WRITABLE_UPSTREAM, client_send(), origin_answer(), upstream_send(), UPSTREAM_EOF,
        upstream_send(), NEXT, TIMER),
    "forward_denied": seed(T_FORWARD_DENY, 0, 0, client_send(), NEXT, TIMER),
    "forward_get_basic": seed(
        T_FORWARD_GET, 0, 0, client_send(), RESOLVE_BOTH, CONNECT_OK, NEXT, origin_answer(), upstream_send(),
        UPSTREAM_RESET, NEXT, TIMER),
    "credential_stream": seed(
        T_CRED, 4, 0, client_send(S100), client_send(), NEXT, TIMER, CURL_PULL, CURL_PULL_ALL, CURL_PULL_ALL,
        CURL_100, CURL_END_HEAD, CURL_STATUS, CURL_HEADER, CURL_END_HEAD, CURL_BODY, STALL_CLIENT, CURL_BODY_BIG,
        CURL_BODY_BIG, WRITABLE_CLIENT, NEXT, CURL_BODY, CURL_DONE, NEXT, client_send(), NEXT, TIMER),
    "credential_client_leaves_mid_body": seed(
        T_CRED, 6, 0, client_send(S4096), NEXT, CURL_PULL_ALL, CURL_PULL_ALL, CLIENT_ABANDON, client_send(),
        CURL_PULL_ALL, NEXT, TIMER),
    "credential_upstream_fails": seed(T_CRED, 2, 0, client_send(), NEXT, CURL_PULL_ALL, CURL_ERROR, NEXT, TIMER),
    "credential_timeout_mid_response": seed(
        T_CRED, 0, 0, client_send(), NEXT, CURL_STATUS, CURL_END_HEAD, CURL_BODY, CURL_TIMEOUT, NEXT, TIMER),
    "credential_without_token": seed(T_CRED_NOTOKEN, 2, 0, client_send(), NEXT, TIMER),
    "raw_tcp": seed(
        T_RAW, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, origin_answer(), upstream_send(), client_send(),
        raw_client(b"more\n"), client_send(), CLIENT_EOF, client_send(), UPSTREAM_EOF, upstream_send(), NEXT, TIMER),
    "drain_on_sigterm_mid_tunnel": seed(
        T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), upstream_send(), SIGTERM, client_send(),
        NEXT, TIMER, TIMER),
    # a CONNECT to a host rule without a port, on a non-TLS port, carrying plain
    # HTTP for another Host, then a pipelined request
    "review2_connect_port80_plain_http": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"CONNECT open.test:80 HTTP/1.1\r\n" + AUTH + b"\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"
                   b"GET /2 HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
        client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), raw_upstream(b"HTTP/1.1 200 OK\r\n\r\n"),
        upstream_send(), NEXT, TIMER),
    # a ClientHello with an encrypted_client_hello (0xfe0d) or ESNI (0xffce) extension
    "review3_ech": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"CONNECT tunnel.test:443 HTTP/1.1\r\n" + AUTH + b"\r\n"
                   + client_hello("tunnel.test", ext(0xfe0d, b"\x00" + b"\x00\x01\x00\x01" + b"\x07" + b"\x00\x20"
                                                       + b"\x22" * 32 + b"\x00\x10" + b"\x33" * 16))),
        client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), NEXT, TIMER),
    "review3_esni": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"CONNECT tunnel.test:443 HTTP/1.1\r\n" + AUTH + b"\r\n"
                   + client_hello("tunnel.test", ext(0xffce, b"\x13\x01" + b"\x00\x1d" + b"\x00\x04abcd" + b"\x00\x08"
                                                       + b"12345678"))),
        client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), NEXT, TIMER),
    # a warning alert record before the ClientHello, off port 443
    "review4_alert_before_hello": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"CONNECT open.test:8443 HTTP/1.1\r\n" + AUTH + b"\r\n" + b"\x15\x03\x03\x00\x02\x01\x00"
                   + client_hello("elsewhere.test")),
        client_send(), RESOLVE, CONNECT_OK, NEXT, client_send(), client_send(), NEXT, TIMER),
    # method and URL override headers on a forwarded request
    "review5_override_headers": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"POST http://plain.test/up HTTP/1.1\r\nHost: plain.test\r\n" + AUTH
                   + b"X-HTTP-Method-Override: DELETE\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\n"
                   b"Content-Length: 2\r\n\r\nhi"),
        client_send(), RESOLVE, CONNECT_OK, NEXT, raw_upstream(b"HTTP/1.1 204 No Content\r\n\r\n"), upstream_send(),
        UPSTREAM_EOF, upstream_send(), NEXT, TIMER),
    # the session token in a header NAME on the credential route
    "review6_token_in_header_name": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"POST /v1/messages HTTP/1.1\r\nHost: sandstack\r\nx-api-key: " + TOKEN + b"\r\nX-" + TOKEN
                   + b": 1\r\nContent-Length: 2\r\n\r\nhi"),
        client_send(), NEXT, CURL_PULL_ALL, CURL_PULL_ALL, CURL_STATUS, CURL_END_HEAD, CURL_DONE, NEXT, TIMER),
    # items 7 and 8: a literal-address rule's port, and IPv4 embedded in IPv6 answers
    "review7_literal_other_port": seed(
        T_SCRIPT, 0, 0, raw_client(b"CONNECT open.test:9999 HTTP/1.1\r\n" + AUTH + b"\r\n"), client_send(),
        RESOLVE_MIXED, NEXT, TIMER),
    "review8_embedded_ipv4": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE_MAPPED, NEXT, TIMER),
    # Host must match: an absolute-form authority and a Host for another name on the forward route
    "review_host_mismatch_forward": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"GET http://plain.test/up HTTP/1.1\r\nHost: evil.test\r\n" + AUTH + b"\r\n"), client_send(),
        RESOLVE, CONNECT_OK, NEXT, TIMER),
    # smuggling shapes the parser refuses, through the event path
    "smuggle_te_cl": seed(
        T_SCRIPT, 0, 0,
        raw_client(b"POST http://plain.test/up HTTP/1.1\r\nHost: plain.test\r\n" + AUTH
                   + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), client_send(), NEXT, TIMER),
    # the ask hook: a held tunnel or forward allowed (once, for the session), denied, timed out,
    # its client gone (a FIN, a reset) before an answer, and an answer after the ask is gone
    "ask_tunnel_allow": seed(T_DENIED, ASK, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK, client_tls(),
                             origin_answer(15), client_send(), NEXT, NEXT),
    "ask_tunnel_allow_session": seed(T_DENIED, ASK, 0, client_send(), ASK_ALLOW_SESSION, RESOLVE, CONNECT_OK,
                                     client_tls(), origin_answer(15), NEXT),
    "ask_forward_deny": seed(T_ASK_FORWARD, ASK | 3, 0, client_send(), ASK_DENY, NEXT, NEXT, ASK_GONE),
    "ask_forward_allow": seed(T_ASK_FORWARD, ASK | 3, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK,
                              origin_answer(15), NEXT, ASK_GONE),
    "ask_timeout": seed(T_DENIED, ASK, 0, client_send(), TIMER, TIMER, TIMER, ASK_GONE, NEXT),
    "ask_client_close": seed(T_ASK_FORWARD, ASK | 1, 0, client_send(), CLIENT_EOF, client_send(S1), NEXT, ASK_GONE,
                             ASK_ALLOW),
    "ask_client_reset": seed(T_DENIED, ASK, 0, client_send(), CLIENT_RESET, NEXT, ASK_GONE, ASK_DENY),
    # an allow once on an inspected host admits that connection's requests to it, not another
    # Host or SNI; a held inspected CONNECT denied
    "ask_inspect_allow_once": seed(T_ASK_INSPECT, ASK | 2, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK,
                                   TLS_EXCHANGE),
    "ask_inspect_allow_session": seed(T_ASK_INSPECT, ASK | 2, 0, client_send(), ASK_ALLOW_SESSION, RESOLVE,
                                      CONNECT_OK, TLS_EXCHANGE),
    "ask_inspect_bad_sni": seed(T_ASK_INSPECT_BADSNI, ASK | 2, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK,
                                TLS_EXCHANGE),
    "ask_inspect_bad_host": seed(T_ASK_INSPECT_BADHOST, ASK | 2, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK,
                                 TLS_EXCHANGE),
    "ask_inspect_deny": seed(T_ASK_INSPECT, ASK, 0, client_send(), ASK_DENY, NEXT, ASK_GONE),
    # a new policy takes an allow once back: the tunnel and the inspected connection it admitted
    # close, mid-exchange; one a rule admits stays, and so does a grant across a remembered answer
    "ask_tunnel_revoked": seed(T_DENIED, ASK, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK, client_tls(),
                               SET_POLICY, client_send(), origin_answer(15), NEXT, NEXT),
    "ask_inspect_revoked": seed(T_ASK_INSPECT, ASK | 2, 0, client_send(), ASK_ALLOW, RESOLVE, CONNECT_OK,
                                client_tls(), SET_POLICY, TLS_EXCHANGE),
    "ask_session_then_revoked": seed(T_DENIED, ASK, 0, client_send(), ASK_ALLOW_SESSION, RESOLVE, CONNECT_OK,
                                     client_tls(), SET_POLICY, client_send(), NEXT),
    "tunnel_policy_set_again": seed(T_TUNNEL, 0, 0, client_send(), RESOLVE, CONNECT_OK, client_tls(), SET_POLICY,
                                    origin_answer(15), client_send(), NEXT),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "corpus",
                                                             "fuzz_proxy_events")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(SEEDS), os.path.normpath(out)))


if __name__ == "__main__":
    main()
