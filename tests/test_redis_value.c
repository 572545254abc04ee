/* The Redis value codec (src/kv/redis_value.h): round trips for every codec,
 * and hostile values (truncated, bit-flipped anywhere, oversized, another
 * model's, random bytes, a lying zstd frame) that must never decode. */
#include "harness.h"
#include "test_redis_util.h"

#include "kv/redis_marker.h"
#include "kv/redis_value.h"

#include <zstd.h>

static const kvs_kv_shape SHAPE = {3, 2, 16, KVS_KV_F16};

TEST(roundtrip_every_codec) {
    kvs_key fp;
    rt_fill_key(&fp, 1);
    kvs_chunk *c = rt_make_chunk(&SHAPE, &fp, NULL, 0, 40, 7);
    for (int codec = 0; codec < KVS_RV_CODEC_COUNT; codec++) {
        uint8_t *v;
        size_t len;
        CHECK_EQ_INT(kvs_rv_encode(&fp, c, (kvs_rv_codec)codec, 1, NULL, &v, &len), KVS_OK);
        kvs_rv_expect x = {&fp, &SHAPE, &c->prefix_key, 1 << 20, NULL};
        kvs_chunk *d = NULL;
        kvs_disk_verdict verdict;
        CHECK_EQ_INT(kvs_rv_decode(v, len, &x, "value", &d, &verdict), KVS_OK);
        CHECK(d && d->kv_bytes == c->kv_bytes && !memcmp(d->kv, c->kv, c->kv_bytes));
        CHECK(d && d->pos0 == c->pos0 && d->n_tok == c->n_tok && kvs_key_equal(&d->content_key, &c->content_key));
        kvs_chunk_unref(d);
        /* the header alone (listing) from a prefix of the value */
        kvs_chunk *h = NULL;
        kvs_key vfp;
        CHECK_EQ_INT(kvs_rv_decode_header(v, KVS_RV_PREFIX_BYTES + kvs_disk_header_bytes(c->n_tok, 0), len, &x, "value",
                                          &h, &vfp, &verdict),
                     KVS_OK);
        CHECK(h && !h->kv && kvs_key_equal(&vfp, &fp) && kvs_key_equal(&h->prefix_key, &c->prefix_key));
        kvs_chunk_unref(h);
        free(v);
    }
    /* The f32 shape goes through the 4-plane shuffle. */
    kvs_kv_shape s32 = SHAPE;
    s32.dtype = KVS_KV_F32;
    kvs_chunk *c32 = rt_make_chunk(&s32, &fp, NULL, 0, 9, 3);
    uint8_t *v;
    size_t len;
    CHECK_EQ_INT(kvs_rv_encode(&fp, c32, KVS_RV_CODEC_SHUFFLE_ZSTD, 3, NULL, &v, &len), KVS_OK);
    kvs_rv_expect x = {&fp, &s32, NULL, 0, NULL};
    kvs_chunk *d = NULL;
    CHECK_EQ_INT(kvs_rv_decode(v, len, &x, "value", &d, NULL), KVS_OK);
    CHECK(d && !memcmp(d->kv, c32->kv, c32->kv_bytes));
    kvs_chunk_unref(d);
    free(v);
    kvs_chunk_unref(c32);
    kvs_chunk_unref(c);
}

/* Decodes v and expects rejection with one of the given verdicts. */
static void expect_rejected(const uint8_t *v, size_t len, const kvs_rv_expect *x, const char *what) {
    kvs_chunk *d = NULL;
    kvs_disk_verdict verdict = KVS_DISK_OK;
    int st = kvs_rv_decode(v, len, x, what, &d, &verdict);
    CHECK_MSG(st != KVS_OK && d == NULL && verdict != KVS_DISK_OK, "%s was accepted", what);
    if (d) kvs_chunk_unref(d);
}

TEST(truncated_and_bit_flipped_values_are_rejected) {
    kvs_key fp;
    rt_fill_key(&fp, 2);
    kvs_chunk *c = rt_make_chunk(&SHAPE, &fp, NULL, 0, 33, 11);
    for (int codec = 0; codec < KVS_RV_CODEC_COUNT; codec++) {
        uint8_t *v;
        size_t len;
        CHECK_EQ_INT(kvs_rv_encode(&fp, c, (kvs_rv_codec)codec, 1, NULL, &v, &len), KVS_OK);
        kvs_rv_expect x = {&fp, &SHAPE, &c->prefix_key, 1 << 20, NULL};
        char what[64];
        /* every truncation length on a sparse grid, the last bytes densely */
        for (size_t cut = 0; cut < len; cut += (cut + 64 < len ? 1 + cut / 7 : 1)) {
            snprintf(what, sizeof what, "%s cut to %zu", kvs_rv_codec_name((kvs_rv_codec)codec), cut);
            expect_rejected(v, cut, &x, what);
        }
        /* one flipped bit in every byte of the header and wrapper, and a
         * sample of payload bytes (quick mode: fewer) */
        size_t step = rt_quick() ? 7 : 1;
        uint8_t *w = malloc(len);
        for (size_t i = 0; i < len; i += (i < 512 ? step : 13 * step)) {
            memcpy(w, v, len);
            w[i] ^= (uint8_t)(1u << (i % 8));
            snprintf(what, sizeof what, "%s bit flip at %zu", kvs_rv_codec_name((kvs_rv_codec)codec), i);
            expect_rejected(w, len, &x, what);
        }
        /* one byte appended */
        uint8_t *longer = malloc(len + 1);
        memcpy(longer, v, len);
        longer[len] = 0;
        expect_rejected(longer, len + 1, &x, "value + 1 byte");
        free(longer);
        free(w);
        free(v);
    }
    kvs_chunk_unref(c);
}

TEST(foreign_oversized_misplaced_and_random_values_are_rejected) {
    kvs_key fp, other;
    rt_fill_key(&fp, 3);
    rt_fill_key(&other, 4);
    kvs_chunk *c = rt_make_chunk(&SHAPE, &fp, NULL, 0, 64, 5);
    uint8_t *v;
    size_t len;
    CHECK_EQ_INT(kvs_rv_encode(&fp, c, KVS_RV_CODEC_RAW, 0, NULL, &v, &len), KVS_OK);
    kvs_chunk *d = NULL;
    kvs_disk_verdict verdict;
    /* another model's fingerprint */
    kvs_rv_expect x = {&other, &SHAPE, &c->prefix_key, 1 << 20, NULL};
    CHECK_EQ_INT(kvs_rv_decode(v, len, &x, "foreign", &d, &verdict), KVS_ERR_MODEL_MISMATCH);
    CHECK_EQ_INT(verdict, KVS_DISK_FOREIGN);
    /* another KV shape */
    kvs_kv_shape s2 = SHAPE;
    s2.head_dim = 32;
    kvs_rv_expect x2 = {&fp, &s2, &c->prefix_key, 1 << 20, NULL};
    CHECK_EQ_INT(kvs_rv_decode(v, len, &x2, "shape", &d, &verdict), KVS_ERR_MODEL_MISMATCH);
    /* stored under another chunk's key */
    kvs_key wrong;
    rt_fill_key(&wrong, 5);
    kvs_rv_expect x3 = {&fp, &SHAPE, &wrong, 1 << 20, NULL};
    expect_rejected(v, len, &x3, "misplaced");
    /* over the limit: rejected before anything is allocated */
    kvs_rv_expect x4 = {&fp, &SHAPE, &c->prefix_key, len - 1, NULL};
    expect_rejected(v, len, &x4, "oversized");
    /* random bytes, with and without the right magic */
    uint64_t seed = 99;
    uint8_t *r = malloc(len);
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < len; i++) r[i] = (uint8_t)(rt_rand(&seed) >> 24);
        if (round & 1) memcpy(r, KVS_RV_MAGIC, 4);
        if (round & 2) memcpy(r + KVS_RV_PREFIX_BYTES, v + KVS_RV_PREFIX_BYTES, 4); /* inner magic too */
        expect_rejected(r, len - (size_t)(round % 50), &x, "random");
    }
    free(r);
    free(v);
    kvs_chunk_unref(c);
    CHECK(d == NULL);
}

/* A zstd frame that claims a huge content size, re-wrapped with valid
 * checksums around it: the decoder trusts only the verified header's size. */
TEST(lying_zstd_frame_is_rejected) {
    kvs_key fp;
    rt_fill_key(&fp, 6);
    kvs_chunk *c = rt_make_chunk(&SHAPE, &fp, NULL, 0, 16, 2);
    uint8_t *v;
    size_t len;
    CHECK_EQ_INT(kvs_rv_encode(&fp, c, KVS_RV_CODEC_ZSTD, 1, NULL, &v, &len), KVS_OK);
    /* a frame of 1 GB of zeros (tiny compressed) replacing the payload */
    size_t big = (size_t)1 << 30;
    size_t cap = ZSTD_compressBound(1 << 20);
    uint8_t *zeros = calloc(1, 1 << 20), *frame = malloc(cap);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setPledgedSrcSize(cc, big);
    ZSTD_outBuffer out = {frame, cap, 0};
    for (size_t done = 0; done < big; done += 1 << 20) {
        ZSTD_inBuffer in = {zeros, 1 << 20, 0};
        ZSTD_compressStream2(cc, &out, &in, done + (1 << 20) == big ? ZSTD_e_end : ZSTD_e_continue);
    }
    ZSTD_freeCCtx(cc);
    size_t hb = KVS_RV_PREFIX_BYTES + kvs_disk_header_bytes(c->n_tok, 0);
    uint8_t *w = malloc(hb + out.pos);
    memcpy(w, v, hb);
    memcpy(w + hb, frame, out.pos);
    rt_rewrap(w, hb + out.pos, hb); /* valid wrapper length + checksum for the new payload */
    kvs_rv_expect x = {&fp, &SHAPE, &c->prefix_key, 1 << 20, NULL};
    expect_rejected(w, hb + out.pos, &x, "lying zstd frame");
    free(w);
    free(frame);
    free(zeros);
    free(v);
    kvs_chunk_unref(c);
}

/* The lengths a chunk gets partial-chunk markers at (redis_marker.h):
 * ascending, below its length, at most KVS_RM_MAX, always its length - 1
 * (the same prompt again), every length for a grid chunk. */
TEST(marker_lengths) {
    int lens[KVS_RM_MAX];
    CHECK_EQ_INT(kvs_rm_lengths(1, lens), 0);
    CHECK(kvs_rm_lengths(2, lens) == 1 && lens[0] == 1);
    CHECK_EQ_INT(kvs_rm_lengths(64, lens), 63);
    for (int i = 0; i < 63; i++) CHECK_EQ_INT(lens[i], i + 1);
    const int sizes[] = {65, 66, 127, 128, 512, 4096, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int n = kvs_rm_lengths(sizes[k], lens);
        int ok = n >= 2 && n <= KVS_RM_MAX && lens[n - 1] == sizes[k] - 1 && lens[0] >= 1;
        for (int i = 1; i < n; i++) ok &= lens[i] > lens[i - 1];
        /* strided: the gaps below the last length are one stride */
        for (int i = 1; i < n - 1; i++) ok &= lens[i] - lens[i - 1] == lens[0];
        CHECK_MSG(ok, "a chunk of %d tokens: %d lengths, first %d, last %d", sizes[k], n, lens[0], lens[n - 1]);
    }
}

TEST(codec_names) {
    kvs_rv_codec c;
    for (int i = 0; i < KVS_RV_CODEC_COUNT; i++) {
        CHECK_EQ_INT(kvs_rv_codec_parse(kvs_rv_codec_name((kvs_rv_codec)i), &c), KVS_OK);
        CHECK_EQ_INT(c, i);
    }
    CHECK(kvs_rv_codec_parse("lz4", &c) != KVS_OK);
}

int main(void) {
    RUN(roundtrip_every_codec);
    RUN(truncated_and_bit_flipped_values_are_rejected);
    RUN(foreign_oversized_misplaced_and_random_values_are_rejected);
    RUN(lying_zstd_frame_is_rejected);
    RUN(marker_lengths);
    RUN(codec_names);
    return kt_summary();
}
