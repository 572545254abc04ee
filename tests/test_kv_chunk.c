/* src/kv/ basics: chunk layout and copies, keys, chunking policy, checksum. */
#include "harness.h"

#include "base/sha256.h"
#include "kv/checksum.h"
#include "kv/chunk.h"
#include "kv/chunking.h"
#include "kv/keys.h"
#include "test_kv_fake.h"

static const kvs_kv_shape SMOL = {30, 3, 64, KVS_KV_F16};

TEST(payload_bytes) {
    /* SmolLM2-135M, f16: 4096 tokens = 4096 * 30 * 2 * 3 * 64 * 2 bytes */
    CHECK_EQ_INT(kvs_kv_payload_bytes(&SMOL, 4096), 94371840);
    kvs_kv_shape f32 = SMOL;
    f32.dtype = KVS_KV_F32;
    CHECK_EQ_INT(kvs_kv_payload_bytes(&f32, 1), 30 * 2 * 3 * 64 * 4);
    kvs_kv_shape bad = SMOL;
    bad.dtype = (kvs_kv_type)7;
    CHECK_EQ_INT(kvs_kv_shape_check(&bad), KVS_ERR_INVALID_ARG);
    bad = SMOL;
    bad.head_dim = 0;
    CHECK_EQ_INT(kvs_kv_shape_check(&bad), KVS_ERR_INVALID_ARG);
    kvs_chunk *c;
    CHECK_EQ_INT(kvs_chunk_new(&SMOL, 0, 1, &c), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_chunk_new(&SMOL, 10, 0, &c), KVS_OK);
    CHECK(c->kv == NULL && c->kv_bytes == kvs_kv_payload_bytes(&SMOL, 10));
    CHECK_EQ_INT(atomic_load(&c->refs), 1);
    kvs_chunk_ref(c);
    kvs_chunk_unref(c);
    kvs_chunk_unref(c);
    kvs_chunk_unref(NULL);
}

/* Copy-out then copy-in at another slot reproduces the bytes, touches nothing
 * else, and the payload has the documented layout. Both dtypes. */
static void copy_roundtrip(kvs_kv_type dtype) {
    kvs_kv_shape s = {3, 2, 8, dtype};
    enum { NCTX = 50, N = 50 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = 1000 + i * 3;
    fake_kv *src = fake_kv_new(s, NCTX), *dst = fake_kv_new(s, NCTX);
    fake_kv_fill(src, toks, N);
    kvs_chunk *c;
    CHECK_EQ_INT(kvs_chunk_new(&s, 12, 1, &c), KVS_OK);
    CHECK_EQ_INT(kvs_chunk_copy_from_kv(c, 0, 12, &src->kv, 20), KVS_OK);
    /* layout: element (l, half, h, t, d) at ((l*2 + half)*n_kv_head + h)*n_tok*head_dim + t*head_dim + d */
    size_t es = kvs_kv_dtype_size(dtype);
    int bad = 0;
    for (int l = 0; l < 3; l++)
        for (int half = 0; half < 2; half++)
            for (int h = 0; h < 2; h++)
                for (int t = 0; t < 12; t++)
                    for (int d = 0; d < 8; d++) {
                        size_t ci = ((((size_t)l * 2 + half) * 2 + h) * 12 + t) * 8 + d;
                        size_t bi = ((size_t)h * NCTX + 20 + t) * 8 + d;
                        const uint8_t *bp = (const uint8_t *)(half ? src->v[l] : src->k[l]) + bi * es;
                        if (memcmp((uint8_t *)c->kv + ci * es, bp, es)) bad++;
                    }
    CHECK_EQ_INT(bad, 0);
    /* the per-layer accessors point at the same places */
    CHECK((uint8_t *)kvs_chunk_layer_k(c, 2) == (uint8_t *)c->kv + (size_t)2 * 2 * 2 * 12 * 8 * es);
    CHECK((uint8_t *)kvs_chunk_layer_v(c, 2) == (uint8_t *)c->kv + (size_t)(2 * 2 + 1) * 2 * 12 * 8 * es);
    /* copy the middle 5 tokens back at slot 20 + 3: equal there, zero elsewhere */
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 3, 5, &dst->kv, 23), KVS_OK);
    CHECK(fake_kv_equal(src, dst, 23, 28));
    CHECK(fake_kv_is_zero(dst, 0, 23));
    CHECK(fake_kv_is_zero(dst, 28, NCTX));
    /* bounds and shape are checked, nothing is copied on error */
    fake_kv_zero(dst);
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 10, 3, &dst->kv, 0), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 0, 12, &dst->kv, NCTX - 11), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, -1, 2, &dst->kv, 0), KVS_ERR_INVALID_ARG);
    CHECK(fake_kv_is_zero(dst, 0, NCTX));
    kvs_kv_buffer other = dst->kv;
    other.head_dim = 4;
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 0, 1, &other, 0), KVS_ERR_INVALID_ARG);
    kvs_chunk_unref(c);
    CHECK_EQ_INT(kvs_chunk_new(&s, 4, 0, &c), KVS_OK);
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 0, 1, &dst->kv, 0), KVS_ERR_INVALID_ARG); /* no payload */
    kvs_chunk_unref(c);
    fake_kv_free(src);
    fake_kv_free(dst);
}

TEST(copy_roundtrip_f16) { copy_roundtrip(KVS_KV_F16); }
TEST(copy_roundtrip_f32) { copy_roundtrip(KVS_KV_F32); }

/* Keys against an independent construction: bytes written out by hand. */
TEST(keys_match_spec) {
    kvs_key fp;
    for (int i = 0; i < 32; i++) fp.b[i] = (uint8_t)(i * 7 + 1);
    int32_t toks[5] = {1, 256, -2, 0x12345678, 49151};
    uint8_t buf[32 + 20];
    memcpy(buf, fp.b, 32);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) buf[32 + 4 * i + j] = (uint8_t)((uint32_t)toks[i] >> (8 * j));
    uint8_t want[32];
    kvs_sha256_digest(buf, sizeof buf, want);
    kvs_key k;
    kvs_key_prefix(&fp, toks, 5, &k);
    CHECK(memcmp(k.b, want, 32) == 0);
    kvs_key_content(&fp, toks, 5, &k);
    CHECK(memcmp(k.b, want, 32) == 0); /* same formula for the first chunk */
    /* chain: parent = previous prefix key */
    kvs_span spans[2] = {{0, 2, 0}, {2, 5, 0}};
    kvs_key chain[2], k0, k1;
    CHECK_EQ_INT(kvs_key_prefix_chain(&fp, toks, spans, 2, chain), KVS_OK);
    kvs_key_prefix(&fp, toks, 2, &k0);
    kvs_key_prefix(&k0, toks + 2, 3, &k1);
    CHECK(kvs_key_equal(&chain[0], &k0) && kvs_key_equal(&chain[1], &k1));
    /* the same tokens after another context: another prefix key, same content key */
    kvs_key c1, c2, other;
    kvs_key_content(&fp, toks + 2, 3, &c1);
    kvs_key_prefix(&fp, toks + 2, 3, &other);
    CHECK(!kvs_key_equal(&other, &k1));
    kvs_key_content(&fp, toks + 2, 3, &c2);
    CHECK(kvs_key_equal(&c1, &c2));
    /* another model: another content key */
    kvs_key fp2 = fp;
    fp2.b[31] ^= 1;
    kvs_key_content(&fp2, toks + 2, 3, &c2);
    CHECK(!kvs_key_equal(&c1, &c2));
    /* every length at once (a chunk's tails): each the key of that length */
    kvs_key lens[4];
    kvs_key_prefix_lengths(&k0, toks, 2, 5, lens);
    for (int n = 2; n <= 5; n++) {
        kvs_key one;
        kvs_key_prefix(&k0, toks, n, &one);
        CHECK_MSG(kvs_key_equal(&lens[n - 2], &one), "length %d", n);
    }
    /* chosen lengths in one pass, as kvs_key_prefix each */
    const int at[3] = {1, 3, 5};
    kvs_key some[3];
    kvs_key_prefix_at(&k0, toks, at, 3, some);
    for (int i = 0; i < 3; i++) {
        kvs_key one;
        kvs_key_prefix(&k0, toks, at[i], &one);
        CHECK_MSG(kvs_key_equal(&some[i], &one), "length %d", at[i]);
    }
    /* spans that do not tile are refused */
    kvs_span gap[2] = {{0, 2, 0}, {3, 5, 0}};
    CHECK_EQ_INT(kvs_key_prefix_chain(&fp, toks, gap, 2, chain), KVS_ERR_INVALID_ARG);
    /* hex round trip */
    char hex[65];
    kvs_key_to_hex(&k1, hex);
    CHECK_EQ_INT(strlen(hex), 64);
    kvs_key back;
    CHECK_EQ_INT(kvs_key_from_hex(hex, &back), KVS_OK);
    CHECK(kvs_key_equal(&back, &k1));
    CHECK_EQ_INT(kvs_key_from_hex("abc", &back), KVS_ERR_INVALID_ARG);
    hex[10] = 'g';
    CHECK_EQ_INT(kvs_key_from_hex(hex, &back), KVS_ERR_INVALID_ARG);
}

TEST(chunking_examples) {
    kvs_span sp[16];
    int n;
    /* the picture in chunking.h */
    int borders[] = {100};
    CHECK_EQ_INT(kvs_chunking_split(200, 0, 64, borders, 1, sp, 16, &n), KVS_OK);
    CHECK_EQ_INT(n, 5);
    int want[5][3] = {{0, 64, 0}, {64, 100, KVS_SPAN_BORDER}, {100, 128, 0}, {128, 192, 0}, {192, 200, KVS_SPAN_PARTIAL}};
    for (int i = 0; i < 5 && i < n; i++) {
        CHECK_EQ_INT(sp[i].start, want[i][0]);
        CHECK_EQ_INT(sp[i].end, want[i][1]);
        CHECK_EQ_INT(sp[i].flags, want[i][2]);
    }
    /* aligned to absolute positions: starting at position 10 */
    CHECK_EQ_INT(kvs_chunking_split(100, 10, 64, NULL, 0, sp, 16, &n), KVS_OK);
    CHECK(n == 2 && sp[0].start == 0 && sp[0].end == 54 && sp[1].end == 100 && sp[1].flags == KVS_SPAN_PARTIAL);
    /* exactly on the grid: no partial chunk */
    CHECK_EQ_INT(kvs_chunking_split(128, 0, 64, NULL, 0, sp, 16, &n), KVS_OK);
    CHECK(n == 2 && sp[1].flags == 0);
    /* borders outside (0, n) and duplicates are harmless */
    int b2[] = {-5, 0, 30, 30, 64, 128, 500};
    CHECK_EQ_INT(kvs_chunking_split(128, 0, 64, b2, 7, sp, 16, &n), KVS_OK);
    CHECK(n == 3 && sp[0].end == 30 && sp[0].flags == KVS_SPAN_BORDER && sp[1].end == 64 && sp[2].end == 128);
    /* errors */
    int desc[] = {50, 40};
    CHECK_EQ_INT(kvs_chunking_split(100, 0, 64, desc, 2, sp, 16, &n), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_chunking_split(100, 0, 0, NULL, 0, sp, 16, &n), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_chunking_split(300, 0, 64, NULL, 0, sp, 2, &n), KVS_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(kvs_chunking_split(0, 0, 64, NULL, 0, sp, 16, &n), KVS_OK);
    CHECK_EQ_INT(n, 0);
}

/* Random inputs: spans tile [0, n), never cross a grid line or a border, end
 * only at a grid line, a border or n; a prefix of the sequence is cut the same
 * way except its last span. */
TEST(chunking_properties) {
    uint64_t rng = 42;
    int bad = 0;
    static kvs_span sp[2048], sp2[2048];
    for (int iter = 0; iter < 2000; iter++) {
        rng = fake_mix(rng + (uint64_t)iter);
        int n = (int)(rng % 700), pos0 = (int)((rng >> 10) % 300), cs = 1 + (int)((rng >> 20) % 100);
        int nb = (int)((rng >> 30) % 6), borders[6];
        for (int i = 0; i < nb; i++) borders[i] = (int)(fake_mix(rng + (uint64_t)i) % (uint64_t)(n + 2)) - 1;
        for (int i = 1; i < nb; i++) /* insertion sort */
            for (int j = i; j > 0 && borders[j] < borders[j - 1]; j--) {
                int t = borders[j]; borders[j] = borders[j - 1]; borders[j - 1] = t;
            }
        int cnt;
        int cap = kvs_chunking_max_spans(n, cs, nb);
        if (kvs_chunking_split(n, pos0, cs, borders, nb, sp, cap, &cnt) != KVS_OK) { bad++; continue; }
        int at = 0;
        for (int i = 0; i < cnt; i++) {
            if (sp[i].start != at || sp[i].end <= sp[i].start) bad++;
            /* no grid line strictly inside */
            if ((pos0 + sp[i].start) / cs != (pos0 + sp[i].end - 1) / cs) bad++;
            for (int b = 0; b < nb; b++)
                if (borders[b] > sp[i].start && borders[b] < sp[i].end) bad++;
            int on_grid = (pos0 + sp[i].end) % cs == 0, on_border = 0;
            for (int b = 0; b < nb; b++) on_border |= borders[b] == sp[i].end;
            if (!on_grid && !on_border && sp[i].end != n) bad++;
            if (!!(sp[i].flags & KVS_SPAN_PARTIAL) != (sp[i].end == n && !on_grid)) bad++;
            at = sp[i].end;
        }
        if (at != n) bad++;
        /* prefix stability */
        if (n > 1) {
            int m = 1 + (int)((rng >> 40) % (uint64_t)(n - 1)), cnt2;
            kvs_chunking_split(m, pos0, cs, borders, nb, sp2, 2048, &cnt2);
            for (int i = 0; i + 1 < cnt2; i++)
                if (sp2[i].start != sp[i].start || sp2[i].end != sp[i].end) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(checksum_detects_damage) {
    enum { N = 1000 };
    static uint8_t buf[N];
    for (int i = 0; i < N; i++) buf[i] = (uint8_t)fake_mix((uint64_t)i);
    uint64_t h = kvs_checksum64(buf, N, 0);
    CHECK(h == kvs_checksum64(buf, N, 0));
    CHECK(h != kvs_checksum64(buf, N, 1));
    CHECK(h != kvs_checksum64(buf, N - 1, 0));
    int same = 0;
    for (int i = 0; i < N; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            buf[i] ^= (uint8_t)(1 << bit);
            if (kvs_checksum64(buf, N, 0) == h) same++;
            buf[i] ^= (uint8_t)(1 << bit);
        }
    CHECK_EQ_INT(same, 0);
    /* zero padding of the tail does not hide a length change */
    static uint8_t z[130];
    CHECK(kvs_checksum64(z, 65, 0) != kvs_checksum64(z, 66, 0));
    CHECK(kvs_checksum64(z, 0, 0) != kvs_checksum64(z, 64, 0));
}

/* Any split into updates gives the one-shot value. */
TEST(checksum_incremental) {
    enum { N = 5000 };
    static uint8_t buf[N];
    for (int i = 0; i < N; i++) buf[i] = (uint8_t)fake_mix((uint64_t)i * 7);
    uint64_t rng = 1;
    int bad = 0;
    for (int iter = 0; iter < 300; iter++) {
        size_t len = (size_t)(fake_mix(rng++) % N);
        uint64_t want = kvs_checksum64(buf, len, 5);
        kvs_checksum_state st;
        kvs_checksum64_init(&st, 5);
        size_t at = 0;
        while (at < len) {
            size_t step = 1 + (size_t)(fake_mix(rng++) % 200);
            if (step > len - at) step = len - at;
            kvs_checksum64_update(&st, buf + at, step);
            at += step;
        }
        if (kvs_checksum64_final(&st) != want) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

int main(void) {
    RUN(payload_bytes);
    RUN(copy_roundtrip_f16);
    RUN(copy_roundtrip_f32);
    RUN(keys_match_spec);
    RUN(chunking_examples);
    RUN(chunking_properties);
    RUN(checksum_detects_damage);
    RUN(checksum_incremental);
    return kt_summary();
}
