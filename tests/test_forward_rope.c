/*
 * The forward pass's RoPE tables (src/model/forward.c rope_table,
 * forward.h kvs_fwd_rope): a row's cos and sin are computed by the first
 * layer of a pass that needs them and reused by later layers with the same
 * configuration and positions. Checked directly, on SmolLM2's layers with
 * copies of the hyperparameters that give some layers other rope
 * configurations (as gemma3's local and global layers have):
 *
 *  - hits and misses: a call with the configuration (base, scale, frequency
 *    factors), the row count and the positions of a kept table takes it
 *    (no table replaced); a change of any one of them computes a new table,
 *    and a third configuration evicts the older of the two kept;
 *  - every call's q and k are memcmp-equal to a fresh kvs_fwd's (no tables,
 *    one thread where the tested one has two), so no stale or foreign table
 *    is ever taken;
 *  - a hit reads the table: a table corrupted before a call that hits it
 *    changes the call's q (so the equality above is not met by recomputing
 *    every time).
 */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "kvstitch.h"
#include "base/threadpool.h"
#include "model/forward.h"
#include "model/model.h"

#define ROWS 16
#if KVS_FWD_ROPE_TABLES != 2
#error "the steps of rope_tables_hit_miss_evict_same_bits assume two tables (which one a third configuration evicts)"
#endif
#define N_CTX 4096

typedef struct rope_env {
    kvs_model *model;
    kvs_hparams hp;          /* the model's, with layer pointing at `layers` */
    kvs_layer_hparams *layers;
    float x[ROWS * 576];
    int d, qd, kvd;
} rope_env;

/* q and k of layer l for rows at pos (m of them), from env->x, on f. */
static void qkv_on(kvs_fwd *f, const rope_env *e, int l, const int32_t *pos, int m, float *q, float *k) {
    f->hp = &e->hp;
    memcpy(f->x, e->x, sizeof(float) * (size_t)m * e->d);
    kvs_fwd_layer_qkv(f, l, pos, m);
    memcpy(q, f->q, sizeof(float) * (size_t)m * e->qd);
    memcpy(k, f->k, sizeof(float) * (size_t)m * e->kvd);
}

/* The same on a fresh kvs_fwd (empty tables, no pool): the reference bits. */
static int qkv_fresh(const rope_env *e, int l, const int32_t *pos, int m, float *q, float *k) {
    kvs_fwd *f = NULL;
    if (kvs_fwd_new(e->model, NULL, ROWS, N_CTX, &f) != KVS_OK) return -1;
    qkv_on(f, e, l, pos, m, q, k);
    kvs_fwd_free(f);
    return 0;
}

/* The table of f (index) holding the configuration of layer l and these
 * positions, or -1. */
static int table_of(const kvs_fwd *f, const rope_env *e, int l, const int32_t *pos, int m) {
    const kvs_layer_hparams *lh = &e->layers[l];
    for (int i = 0; i < KVS_FWD_ROPE_TABLES; i++) {
        const kvs_fwd_rope *t = &f->rope[i];
        if (t->valid && t->m == m && t->base == lh->rope_freq_base && t->scale == lh->rope_freq_scale &&
            t->factors == lh->rope_freq_factors && !memcmp(t->pos, pos, sizeof(int32_t) * (size_t)m))
            return i;
    }
    return -1;
}

static int env_open(rope_env *e) {
    const char *path = kt_model_path();
    if (!path) return -1;
    memset(e, 0, sizeof *e);
    if (kvs_model_load(path, kvs_model_default_params(), &e->model) != KVS_OK) {
        fprintf(stderr, "  load: %s\n", kvs_last_error());
        return -1;
    }
    e->hp = *kvs_model_hparams(e->model);
    e->d = e->hp.n_embd;
    e->qd = e->hp.n_head * e->hp.head_dim;
    e->kvd = e->hp.n_head_kv * e->hp.head_dim;
    if (e->d != 576 || e->qd > 576 || e->kvd > 192) { /* the buffers below are SmolLM2's */
        fprintf(stderr, "  %s: not SmolLM2-135M's shape (n_embd %d)\n", path, e->d);
        return -1;
    }
    e->layers = malloc(sizeof(kvs_layer_hparams) * (size_t)e->hp.n_layer);
    if (!e->layers) return -1;
    memcpy(e->layers, e->hp.layer, sizeof(kvs_layer_hparams) * (size_t)e->hp.n_layer);
    /* layer 1: another base; layer 2: another scale; 0 and 3: the model's */
    e->layers[1].rope_freq_base = e->layers[0].rope_freq_base / 10.0f;
    e->layers[2].rope_freq_scale = e->layers[0].rope_freq_scale / 4.0f;
    e->hp.layer = e->layers;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < e->d * ROWS; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        e->x[i] = (float)((double)(s >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
    }
    return 0;
}

static void env_close(rope_env *e) {
    free(e->layers);
    kvs_model_free(e->model);
}

TEST(rope_tables_hit_miss_evict_same_bits) {
    rope_env e;
    if (env_open(&e)) {
        kt_test_failed++;
        return;
    }
    kvs_pool *pool = kvs_pool_new(2);
    kvs_fwd *f = NULL;
    CHECK(pool != NULL);
    CHECK_EQ_INT(kvs_fwd_new(e.model, pool, ROWS, N_CTX, &f), KVS_OK);
    if (!pool || !f) {
        env_close(&e);
        kvs_pool_free(pool);
        return;
    }
    int32_t p1[ROWS], p2[ROWS];
    for (int r = 0; r < ROWS; r++) p1[r] = p2[r] = 1000 + 37 * r; /* not 0..m: positions are the key */
    p2[ROWS - 1] += 1;                                           /* one position differs */
    static float q[ROWS * 576], k[ROWS * 192], qr[ROWS * 576], kr[ROWS * 192];

    /* layer, positions, rows, and whether it hits a kept table */
    struct step { int l; const int32_t *pos; int m; int hit; } steps[] = {
        {0, p1, ROWS, 0},     /* first: computed */
        {3, p1, ROWS, 1},     /* layer 3, layer 0's configuration */
        {1, p1, ROWS, 0},     /* other base: second table */
        {0, p1, ROWS, 1},     /* both kept */
        {1, p1, ROWS, 1},
        {2, p1, ROWS, 0},     /* a third configuration evicts the older (layer 0's) */
        {0, p1, ROWS, 0},     /* evicted: computed again (evicts layer 1's) */
        {2, p1, ROWS, 1},
        {0, p2, ROWS, 0},     /* one position differs */
        {3, p2, ROWS, 1},
        {0, p1, ROWS - 1, 0}, /* the first m - 1 positions of a kept table: another m */
        {3, p1, ROWS - 1, 1},
    };
    const int n_steps = (int)(sizeof steps / sizeof steps[0]);
    for (int i = 0; i < n_steps; i++) {
        const struct step *s = &steps[i];
        const int before = table_of(f, &e, s->l, s->pos, s->m), next = f->rope_next;
        CHECK_MSG((before >= 0) == s->hit, "step %d: layer %d's table %s kept before the call", i, s->l,
                  before >= 0 ? "is" : "is not");
        qkv_on(f, &e, s->l, s->pos, s->m, q, k);
        CHECK_MSG((f->rope_next == next) == s->hit, "step %d: a table %s replaced", i, s->hit ? "was" : "was not");
        CHECK_MSG(table_of(f, &e, s->l, s->pos, s->m) >= 0, "step %d: no table kept for the call", i);
        CHECK_EQ_INT(qkv_fresh(&e, s->l, s->pos, s->m, qr, kr), 0);
        CHECK_MSG(!memcmp(q, qr, sizeof(float) * (size_t)s->m * e.qd), "step %d: q differs from a fresh pass", i);
        CHECK_MSG(!memcmp(k, kr, sizeof(float) * (size_t)s->m * e.kvd), "step %d: k differs from a fresh pass", i);
    }

    /* A hit reads the table: corrupt row 0's first cos of the kept table of
     * layer 3 at p1 (m - 1 rows, the last step's); the next such call's q
     * must change, where a pass that recomputed would not see it. */
    const int t = table_of(f, &e, 3, p1, ROWS - 1);
    CHECK(t >= 0);
    if (t >= 0) {
        f->rope[t].cs[0] = -f->rope[t].cs[0] + 0.5;
        qkv_on(f, &e, 3, p1, ROWS - 1, q, k);
        CHECK_EQ_INT(qkv_fresh(&e, 3, p1, ROWS - 1, qr, kr), 0);
        CHECK_MSG(memcmp(q, qr, sizeof(float) * (size_t)(ROWS - 1) * e.qd) != 0,
                  "a corrupted table left q unchanged: the hit did not read it");
    }
    kvs_fwd_free(f);
    kvs_pool_free(pool);
    env_close(&e);
}

int main(void) {
    RUN(rope_tables_hit_miss_evict_same_bits);
    return kt_summary();
}
