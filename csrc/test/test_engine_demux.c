/* The demultiplexer of Docker's framed exec and logs stream (csrc/engine/demux.c): payloads
 * byte-exact on their side, in any pieces, within the budget; an unknown stream and a stream cut
 * inside a frame refused. The fuzz target's seeds (fuzz_demux) are cases. */
#include "engine/demux.h"
#include "test/unit.h"

/* A frame header: the stream byte, three zero bytes, the size big-endian (here below 256). */
#define FRAME(stream, size) stream "\0\0\0" "\0\0\0" size

typedef struct {
  int state, finish;
  sse_demux d;
} demuxed;

/* Feeds s in pieces of `piece` bytes; the caller frees r->d. */
static void demux(demuxed *r, const char *s, size_t n, size_t piece, size_t budget) {
  sse_demux_init(&r->d, budget);
  r->state = SSE_DEMUX_OK;
  for (size_t at = 0; at < n; at += piece) r->state = sse_demux_feed(&r->d, s + at, n - at < piece ? n - at : piece);
  r->finish = sse_demux_finish(&r->d);
}

static void splits_the_streams(ut_run *t) {
  static const char s[] = FRAME("\x01", "\x04") "out\n" FRAME("\x02", "\x04") "err\n" FRAME("\x00", "\x02") "in"
      FRAME("\x03", "\x03") "sys" FRAME("\x01", "\x00") FRAME("\x01", "\x02") "\0\xff";
  for (size_t piece = 1; piece <= sizeof s; piece++) {
    demuxed r;
    demux(&r, s, sizeof s - 1, piece, 1024);
    int ok = CHECK_EQ(r.state, SSE_DEMUX_OK) & CHECK_EQ(r.finish, SSE_DEMUX_OK) &
             CHECK_MEM(r.d.out.data, r.d.out.len, "out\nin\0\xff", 8) & CHECK_MEM(r.d.err.data, r.d.err.len, "err\nsys", 7) &
             CHECK_EQ(r.d.frames, 6) & CHECK_EQ(r.d.used, 15);
    if (!ok) NOTE("pieces of %zu", piece);
    sse_demux_free(&r.d);
  }
}

static void refuses_an_unknown_stream(ut_run *t) {
  static const char s[] = FRAME("\x01", "\x02") "ok" FRAME("\x04", "\x02") "no" FRAME("\x01", "\x02") "ok";
  demuxed r;
  demux(&r, s, sizeof s - 1, sizeof s, 1024);
  CHECK_EQ(r.state, SSE_DEMUX_BAD);
  CHECK_EQ(r.finish, SSE_DEMUX_BAD);
  CHECK_MEM(r.d.out.data, r.d.out.len, "ok", 2); /* what came before, and nothing after */
  CHECK_EQ(sse_demux_feed(&r.d, FRAME("\x01", "\x01") "x", 9), SSE_DEMUX_BAD);
  CHECK_EQ(r.d.out.len, 2);
  sse_demux_free(&r.d);
}

static void holds_the_budget(ut_run *t) {
  demuxed r;
  demux(&r, FRAME("\x01", "\x05") "12345", 13, 13, 5); /* exactly the budget */
  CHECK_EQ(r.state, SSE_DEMUX_OK);
  sse_demux_free(&r.d);
  demux(&r, FRAME("\x01", "\x03") "123" FRAME("\x02", "\x03") "456", 22, 22, 5); /* out and err together */
  CHECK_EQ(r.state, SSE_DEMUX_OVER);
  CHECK(r.d.used <= 5);
  sse_demux_free(&r.d);
  /* a frame announcing 4 GiB is refused at the budget, not held */
  demux(&r, "\x01\0\0\0\xff\xff\xff\xff" "0123456789", 18, 3, 8);
  CHECK_EQ(r.state, SSE_DEMUX_OVER);
  CHECK(r.d.used <= 8);
  sse_demux_free(&r.d);
}

static void refuses_a_cut_stream(ut_run *t) {
  demuxed r;
  demux(&r, FRAME("\x01", "\x05") "12", 10, 10, 64); /* inside a payload */
  CHECK_EQ(r.state, SSE_DEMUX_OK);
  CHECK_EQ(r.finish, SSE_DEMUX_TRUNCATED);
  sse_demux_free(&r.d);
  demux(&r, "\x01\0\0", 3, 3, 64); /* inside a header */
  CHECK_EQ(r.finish, SSE_DEMUX_TRUNCATED);
  sse_demux_free(&r.d);
}

/* The span: the rest of a header, then the rest of a payload. */
static void spans_one_piece_at_a_time(ut_run *t) {
  sse_demux d;
  sse_demux_init(&d, 64);
  CHECK_EQ(sse_demux_span(&d, 100), 8);
  sse_demux_feed(&d, "\x02\0\0", 3);
  CHECK_EQ(sse_demux_span(&d, 100), 5);
  sse_demux_feed(&d, "\0\0\0\0\x06", 5);
  CHECK_EQ(sse_demux_span(&d, 100), 6);
  CHECK_EQ(sse_demux_span(&d, 4), 4);
  sse_demux_free(&d);
}

/* The seeds: byte 0 the piece size, byte 1 the budget (in 64-byte units, plus 1), then the stream. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  REQUIRE(CHECK(len > 2));
  demuxed r;
  demux(&r, (const char *)data + 2, len - 2, (size_t)data[0] % 17 + 1, (size_t)data[1] * 64 + 1);
  if (strcmp(name, "bad_stream") == 0) {
    CHECK_EQ(r.state, SSE_DEMUX_BAD);
    CHECK_MEM(r.d.out.data, r.d.out.len, "ok", 2);
  } else if (strcmp(name, "empty_frames") == 0) {
    CHECK_EQ(r.finish, SSE_DEMUX_OK);
    CHECK_MEM(r.d.out.data, r.d.out.len, "in", 2);
    CHECK_MEM(r.d.err.data, r.d.err.len, "sys", 3);
    CHECK_EQ(r.d.frames, 3);
  } else if (strcmp(name, "two_streams") == 0) {
    CHECK_EQ(r.finish, SSE_DEMUX_OK);
    CHECK_MEM(r.d.out.data, r.d.out.len, "out\n\0\xff", 6);
    CHECK_MEM(r.d.err.data, r.d.err.len, "err\n", 4);
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
  sse_demux_free(&r.d);
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "engine_demux");
  UT_RUN(&t, splits_the_streams);
  UT_RUN(&t, refuses_an_unknown_stream);
  UT_RUN(&t, holds_the_budget);
  UT_RUN(&t, refuses_a_cut_stream);
  UT_RUN(&t, spans_one_piece_at_a_time);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_demux", seed, NULL);
  return ut_end(&t);
}
