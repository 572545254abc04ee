/* Prefix index: unit cases from the picture in radix.h, then differential
 * fuzzing against a naive oracle (a list of cached paths scanned linearly),
 * with and without allocation failures. */
#include "harness.h"

#include "kv/radix.h"

#include <stdint.h>

/* ---- deterministic cases --------------------------------------------------- */

/* tokens as letters for readability: "ABCD" -> {'A','B','C','D'} */
static int toks(const char *s, int32_t *out) {
    int n = 0;
    for (; s[n]; n++) out[n] = (int32_t)s[n];
    return n;
}

static int ITEM[16]; /* addresses used as items */

TEST(picture_example) {
    kvs_radix *r;
    CHECK_EQ_INT(kvs_radix_new(&r), KVS_OK);
    int32_t a[16], b[16], p[16];
    int na = toks("ABCDEFGHI", a), nb = toks("ABCDEFXY", b);
    CHECK_EQ_INT(kvs_radix_insert(r, a, 4, 0, &ITEM[0], NULL), KVS_OK);  /* [0,4) */
    CHECK_EQ_INT(kvs_radix_insert(r, a, 8, 4, &ITEM[1], NULL), KVS_OK);  /* [4,8) ..GH */
    CHECK_EQ_INT(kvs_radix_insert(r, a, na, 8, &ITEM[2], NULL), KVS_OK); /* [8,9) */
    CHECK_EQ_INT(kvs_radix_insert(r, b, 4, 0, &ITEM[0], NULL), KVS_RADIX_EXISTS);
    CHECK_EQ_INT(kvs_radix_insert(r, b, nb, 4, &ITEM[3], NULL), KVS_OK); /* [4,8) ..XY */
    CHECK_EQ_INT(kvs_radix_validate(r), KVS_OK);
    kvs_radix_stats st;
    kvs_radix_get_stats(r, &st);
    CHECK_EQ_INT(st.n_nodes, 6); /* root, n1..n5 as drawn */
    CHECK_EQ_INT(st.n_items, 4);
    CHECK_EQ_INT(st.n_edge_tokens, 4 + 2 + 2 + 2 + 1);

    kvs_radix_seg seg[8];
    kvs_radix_match m;
    /* "ABCDEFG": [0,4) from item 0, [4,7) from the first 3 tokens of item 1 */
    int np = toks("ABCDEFGZ", p);
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 8, &m), KVS_OK);
    CHECK_EQ_INT(m.n_matched, 7);
    CHECK_EQ_INT(m.n_covered, 7);
    CHECK_EQ_INT(m.n_segs, 2);
    CHECK(seg[0].item == &ITEM[0] && seg[0].from == 0 && seg[0].to == 4);
    CHECK(seg[1].item == &ITEM[1] && seg[1].from == 4 && seg[1].to == 7 && seg[1].item_start == 4 &&
          seg[1].item_end == 8);
    /* the whole first prompt and more */
    np = toks("ABCDEFGHIJK", p);
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 8, &m), KVS_OK);
    CHECK_EQ_INT(m.n_matched, 9);
    CHECK_EQ_INT(m.n_covered, 9);
    CHECK_EQ_INT(m.n_segs, 3);
    /* stop at the branch point: either [4,8) item serves [4,6) */
    np = toks("ABCDEFQ", p);
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 8, &m), KVS_OK);
    CHECK_EQ_INT(m.n_covered, 6);
    CHECK(m.n_segs == 2 && (seg[1].item == &ITEM[1] || seg[1].item == &ITEM[3]) && seg[1].to == 6);
    /* too small a buffer reports the count */
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 1, &m), KVS_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(m.n_segs, 2);
    /* no match at all */
    np = toks("ZZ", p);
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 8, &m), KVS_OK);
    CHECK_EQ_INT(m.n_matched, 0);
    CHECK_EQ_INT(m.n_covered, 0);
    CHECK_EQ_INT(m.n_segs, 0);

    /* Remove the first chunk: the rest is still indexed but not reachable
     * from position 0 (nothing covers token 0). */
    CHECK_EQ_INT(kvs_radix_remove(r, a, 4, &ITEM[0]), KVS_OK);
    CHECK_EQ_INT(kvs_radix_remove(r, a, 4, &ITEM[0]), KVS_ERR_NOT_FOUND);
    CHECK_EQ_INT(kvs_radix_validate(r), KVS_OK);
    np = toks("ABCDEFGHI", p);
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 8, &m), KVS_OK);
    CHECK_EQ_INT(m.n_matched, 9);
    CHECK_EQ_INT(m.n_covered, 0);
    /* Put it back: the whole chain serves again. */
    CHECK_EQ_INT(kvs_radix_insert(r, a, 4, 0, &ITEM[0], NULL), KVS_OK);
    CHECK_EQ_INT(kvs_radix_lookup(r, p, np, seg, 8, &m), KVS_OK);
    CHECK_EQ_INT(m.n_covered, 9);

    /* Removing the XY branch merges "EF" + "GH" back into one edge. */
    CHECK_EQ_INT(kvs_radix_remove(r, b, nb, &ITEM[3]), KVS_OK);
    CHECK_EQ_INT(kvs_radix_validate(r), KVS_OK);
    kvs_radix_get_stats(r, &st);
    CHECK_EQ_INT(st.n_nodes, 4);
    CHECK_EQ_INT(st.n_edge_tokens, 9);
    /* Remove everything: only the root is left. */
    CHECK_EQ_INT(kvs_radix_remove(r, a, 8, &ITEM[1]), KVS_OK);
    CHECK_EQ_INT(kvs_radix_remove(r, a, na, &ITEM[2]), KVS_OK);
    CHECK_EQ_INT(kvs_radix_remove(r, a, 4, &ITEM[0]), KVS_OK);
    CHECK_EQ_INT(kvs_radix_validate(r), KVS_OK);
    kvs_radix_get_stats(r, &st);
    CHECK_EQ_INT(st.n_nodes, 1);
    CHECK_EQ_INT(st.n_items, 0);
    CHECK_EQ_INT(st.n_edge_tokens, 0);
    kvs_radix_free(r);
}

TEST(bad_arguments) {
    kvs_radix *r;
    CHECK_EQ_INT(kvs_radix_new(&r), KVS_OK);
    int32_t t[4] = {1, 2, 3, 4};
    CHECK_EQ_INT(kvs_radix_insert(r, t, 0, 0, &ITEM[0], NULL), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_radix_insert(r, t, 4, 4, &ITEM[0], NULL), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_radix_insert(r, t, 4, -1, &ITEM[0], NULL), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_radix_remove(r, t, 4, &ITEM[0]), KVS_ERR_NOT_FOUND);
    kvs_radix_match m;
    CHECK_EQ_INT(kvs_radix_lookup(r, t, 4, NULL, 0, &m), KVS_OK);
    CHECK_EQ_INT(m.n_covered, 0);
    kvs_radix_free(r);
}

/* ---- differential fuzz ------------------------------------------------------ */

#define MAXLEN 48
#define MAXENT 400

typedef struct entry {
    int32_t path[MAXLEN];
    int n, start;
    int live;
    kvs_radix_node *node;
} entry;

static entry ents[MAXENT];
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static int rndn(int n) { return (int)(rnd() % (uint32_t)n); }

/* A few base sequences over a small alphabet, so paths share long prefixes
 * and branch at many depths. */
static int32_t base[6][MAXLEN];

static int gen_path(int32_t *out) {
    int n = 1 + rndn(MAXLEN);
    const int32_t *b = base[rndn(6)];
    for (int i = 0; i < n; i++) out[i] = b[i];
    int muts = rndn(3);
    for (int k = 0; k < muts; k++) out[rndn(n)] = rndn(4);
    return n;
}

static int lcp(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Oracle coverage: grow e while some live entry starts at or before e and
 * agrees with the prompt beyond e. */
static int oracle(const int32_t *p, int n, int *matched) {
    int m = 0;
    for (int i = 0; i < MAXENT; i++)
        if (ents[i].live) {
            int l = lcp(ents[i].path, ents[i].n, p, n);
            if (l > m) m = l;
        }
    *matched = m;
    int e = 0;
    for (;;) {
        int best = e;
        for (int i = 0; i < MAXENT; i++) {
            if (!ents[i].live || ents[i].start > e) continue;
            int l = lcp(ents[i].path, ents[i].n, p, n);
            if (l > best) best = l;
        }
        if (best == e) return e;
        e = best;
    }
}

static int fail_rate; /* per 1000 allocations */
static int hook(void) { return rndn(1000) < fail_rate; }

static int check_lookup(kvs_radix *r, const int32_t *p, int n) {
    static kvs_radix_seg seg[MAXLEN + 2];
    kvs_radix_match m;
    int bad = 0;
    int rc = kvs_radix_lookup(r, p, n, seg, MAXLEN + 2, &m);
    int om, oc = oracle(p, n, &om);
    if (rc != KVS_OK || m.n_matched != om || m.n_covered != oc) {
        fprintf(stderr, "  lookup n=%d: rc %d matched %d/%d covered %d/%d\n", n, rc, m.n_matched, om,
                m.n_covered, oc);
        return 1;
    }
    int at = 0;
    for (int s = 0; s < m.n_segs; s++) {
        const entry *en = seg[s].item;
        int idx = (int)(en - ents);
        if (idx < 0 || idx >= MAXENT || !en->live || seg[s].from != at || seg[s].to <= seg[s].from ||
            seg[s].item_start != en->start || seg[s].item_end != en->n || seg[s].from < en->start ||
            seg[s].to > en->n || lcp(en->path, en->n, p, n) < seg[s].to)
            bad = 1;
        at = seg[s].to;
    }
    if (at != m.n_covered) bad = 1;
    if (bad) fprintf(stderr, "  lookup n=%d: bad segments\n", n);
    return bad;
}

static void fuzz(int n_ops, int fail_per_mille, uint64_t seed) {
    rng = seed;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < MAXLEN; j++) base[i][j] = rndn(4);
    memset(ents, 0, sizeof ents);
    kvs_radix *r;
    CHECK_EQ_INT(kvs_radix_new(&r), KVS_OK);
    int errors = 0, ooms = 0, inserts = 0, removes = 0, lookups = 0;
    for (int op = 0; op < n_ops && errors < 5; op++) {
        int kind = rndn(10);
        if (kind < 4) { /* insert */
            int i = rndn(MAXENT);
            if (ents[i].live) continue;
            entry *en = &ents[i];
            en->n = gen_path(en->path);
            /* chunk-like starts mostly, arbitrary sometimes */
            en->start = rndn(3) ? (en->n - 1) / 8 * 8 : rndn(en->n);
            kvs_radix_stats before, after;
            kvs_radix_get_stats(r, &before);
            fail_rate = fail_per_mille;
            kvs_radix_set_alloc_fail_hook(fail_per_mille ? hook : NULL);
            int rc = kvs_radix_insert(r, en->path, en->n, en->start, en, &en->node);
            kvs_radix_set_alloc_fail_hook(NULL);
            if (rc == KVS_OK) {
                en->live = 1;
                inserts++;
            } else if (rc == KVS_ERR_NOMEM) {
                ooms++;
                kvs_radix_get_stats(r, &after);
                if (after.n_nodes != before.n_nodes || after.n_items != before.n_items ||
                    after.bytes != before.bytes) {
                    fprintf(stderr, "  op %d: failed insert changed the tree\n", op);
                    errors++;
                }
            } else {
                fprintf(stderr, "  op %d: insert rc %d\n", op, rc);
                errors++;
            }
        } else if (kind < 7) { /* remove */
            int i = rndn(MAXENT);
            if (!ents[i].live) continue;
            fail_rate = fail_per_mille;
            kvs_radix_set_alloc_fail_hook(fail_per_mille ? hook : NULL);
            /* half by path, half by node handle */
            int rc = rndn(2) ? kvs_radix_remove(r, ents[i].path, ents[i].n, &ents[i])
                             : kvs_radix_remove_at(r, ents[i].node, &ents[i]);
            kvs_radix_set_alloc_fail_hook(NULL);
            if (rc != KVS_OK) { fprintf(stderr, "  op %d: remove rc %d\n", op, rc); errors++; }
            ents[i].live = 0;
            removes++;
            /* removing again must say not found */
            if (kvs_radix_remove(r, ents[i].path, ents[i].n, &ents[i]) != KVS_ERR_NOT_FOUND) errors++;
        } else { /* lookup */
            int32_t p[MAXLEN + 8];
            int n = gen_path(p);
            if (rndn(4) == 0) /* sometimes longer than anything cached */
                for (int k = 0; k < 8; k++) p[n++] = rndn(4);
            errors += check_lookup(r, p, n);
            lookups++;
        }
        if (op % 97 == 0 && kvs_radix_validate(r) != KVS_OK) {
            fprintf(stderr, "  op %d: %s\n", op, kvs_last_error());
            errors++;
        }
    }
    CHECK_EQ_INT(kvs_radix_validate(r), KVS_OK);
    /* every live entry's own path is fully covered */
    for (int i = 0; i < MAXENT; i++)
        if (ents[i].live) errors += check_lookup(r, ents[i].path, ents[i].n);
    CHECK_EQ_INT(errors, 0);
    CHECK(inserts > n_ops / 8 && removes > n_ops / 16 && lookups > n_ops / 8);
    if (fail_per_mille) CHECK(ooms > 0);
    /* drain: the tree must return to a bare root */
    for (int i = 0; i < MAXENT; i++)
        if (ents[i].live) CHECK_EQ_INT(kvs_radix_remove(r, ents[i].path, ents[i].n, &ents[i]), KVS_OK);
    kvs_radix_stats st;
    kvs_radix_get_stats(r, &st);
    CHECK_EQ_INT(st.n_nodes, 1);
    CHECK_EQ_INT(st.n_items, 0);
    kvs_radix_free(r);
}

TEST(fuzz_vs_oracle) {
    for (uint64_t seed = 1; seed <= 4; seed++) fuzz(5000, 0, seed * 0x2545F4914F6CDD1Dull);
}

TEST(fuzz_with_oom) {
    for (uint64_t seed = 1; seed <= 3; seed++) fuzz(4000, 150, seed * 0x9E3779B97F4A7C15ull + 7);
}

/* A long single path with a chunk every 64 tokens, then lookups of every
 * prefix length: covered == length for each (partial use of the last chunk). */
TEST(every_prefix_length) {
    enum { N = 1000 };
    static int32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (i * 7919) % 50000;
    kvs_radix *r;
    CHECK_EQ_INT(kvs_radix_new(&r), KVS_OK);
    static char items[N];
    for (int s = 0; s < N; s += 64) {
        int e = s + 64 < N ? s + 64 : N;
        CHECK_EQ_INT(kvs_radix_insert(r, t, e, s, &items[s], NULL), KVS_OK);
    }
    kvs_radix_seg seg[32];
    kvs_radix_match m;
    int bad = 0;
    for (int n = 1; n <= N; n++) {
        int rc = kvs_radix_lookup(r, t, n, seg, 32, &m);
        if (rc || m.n_covered != n || m.n_segs != (n + 63) / 64) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    kvs_radix_free(r);
}

int main(void) {
    RUN(picture_example);
    RUN(bad_arguments);
    RUN(fuzz_vs_oracle);
    RUN(fuzz_with_oom);
    RUN(every_prefix_length);
    return kt_summary();
}
