/*
 * The one lookup path (store.h): the longest cached prefix of a prompt,
 *
 *   1. RAM index: one radix walk finds the chunks covering the longest
 *      prefix (any part of a chunk serves, on or off the grid); pinned.
 *   2. Their payloads: resident ones are copied, the others fetched from
 *      the tier that holds them (store_fetch.c). The first failure ends the
 *      hit; a damaged or vanished entry there makes the rest of the path be
 *      verified too, so one request drops every damaged entry of its path
 *      and stores them all again.
 *   3. Tiers by key: past the RAM hit, the prompt's grid chunks (chunk_tokens
 *      steps from position 0) have prefix keys computable from the tokens
 *      alone (keys.h), so a tier that was never scanned (Redis) serves them:
 *      one batched call per tier (contains_many before per-chunk get_into
 *      reads, else one get_many), tiers in order, each going on where the
 *      previous stopped. What a tier serves is indexed in RAM under its
 *      token path, so the next lookup finds it in step 1.
 *   4. Tiers by key, the chunk the grid run stopped in: a prompt's partial
 *      tail [g, g + j) (j < chunk_tokens, the last chunk of a prompt that
 *      ended off the grid) is keyed by its own j tokens, which no grid key
 *      of a longer prompt names. The keys of every length j that would
 *      extend the hit (up to what the prompt has) are asked of each tier in
 *      one batched contains_many; the longest held is served. So a tier
 *      serves a tail to every prompt that extends it, as the RAM index does
 *      from its token path (the tail had been written to Redis and never
 *      read: tests/test_redis_store.c). At most TAIL_READS reads a tier: a
 *      server that claims every length and answers each read with junk just
 *      within its allowance had held one lookup for chunk_tokens - 1 reads
 *      in a row (63 reads, 6.4 s; 513 and 231 s at 512-token chunks).
 *   A prompt that stops inside a longer cached chunk (the same prompt
 *   again: its last token is computed; or one that leaves it mid-chunk)
 *   asks in steps 3 and 4 for keys of that chunk's first tokens: Redis
 *   holds markers under them (redis_marker.h) and answers with the longer
 *   chunk, which serves the span when it starts there after the same
 *   parent key with the span's tokens (take_resident).
 *
 * With a KV buffer the KV lands in it (a tier-only chunk is read straight
 * into it and stays tier-only); without one, payloads become resident.
 */
#include "kv/store_impl.h"

#include "base/error.h"
#include "kv/chunking.h"
#include "kv/keys.h"

#include <stdlib.h>
#include <string.h>

static int push_seg(kvs_prefix_hit *hit, int *cap, kvs_chunk *c, int from, int to) {
    if (hit->n_segs == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        kvs_hit_seg *g = realloc(hit->segs, (size_t)nc * sizeof *g);
        if (!g) return kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
        hit->segs = g;
        *cap = nc;
    }
    hit->segs[hit->n_segs++] = (kvs_hit_seg){c, from, to};
    return KVS_OK;
}

/* Step 1: pins the radix coverage into hit. */
static int from_index(kvs_store *s, const int32_t *tokens, int n, kvs_prefix_hit *hit, int *cap) {
    kvs_radix_seg local[64], *segs = local;
    kvs_radix_match m;
    pthread_rwlock_rdlock(&s->lock);
    int rc = kvs_radix_lookup(s->radix, tokens, n, segs, 64, &m);
    if (rc == KVS_ERR_BUFFER_TOO_SMALL) {
        segs = malloc((size_t)m.n_segs * sizeof *segs);
        rc = segs ? kvs_radix_lookup(s->radix, tokens, n, segs, m.n_segs, &m)
                  : kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    }
    if (rc == KVS_OK) {
        hit->n_matched = m.n_matched;
        for (int i = 0; i < m.n_segs && rc == KVS_OK; i++) {
            rc = push_seg(hit, cap, segs[i].item, segs[i].from, segs[i].to);
            if (rc == KVS_OK) kvs_chunk_ref(segs[i].item);
        }
        if (rc == KVS_OK) hit->n_cached = m.n_covered;
    }
    pthread_rwlock_unlock(&s->lock);
    if (segs != local) free(segs);
    return rc;
}

/* Cuts the hit before segment i (unpinning it and the rest). */
static void cut_at(kvs_prefix_hit *hit, int i) {
    for (int j = i; j < hit->n_segs; j++) kvs_chunk_unref(hit->segs[j].chunk);
    hit->n_cached = i < hit->n_segs ? hit->segs[i].from : hit->n_cached;
    hit->n_segs = i;
}

/* Step 2. Returns 1 if the hit was cut. Failed entries go to *bad. */
static int serve_index(kvs_store *s, const kvs_kv_buffer *kv, kvs_prefix_hit *hit, kvs_chunk ***bad, int *n_bad) {
    for (int i = 0; i < hit->n_segs; i++) {
        kvs_hit_seg *g = &hit->segs[i];
        kvs_fetch_fault f = kvs_store_fetch(s, g->chunk, kv, g->from - g->chunk->pos0, g->to - g->from, g->from);
        if (f == KVS_FETCH_OK) continue;
        if (f == KVS_FETCH_TRANSIENT) {
            cut_at(hit, i);
            return 1;
        }
        /* The entry's fault: verify the rest of the path (its chunks are
         * pinned) and collect every failed one for dropping. */
        *bad = malloc((size_t)(hit->n_segs - i) * sizeof **bad);
        if (*bad) (*bad)[(*n_bad)++] = kvs_chunk_ref(g->chunk);
        for (int j = i + 1; *bad && j < hit->n_segs; j++) {
            kvs_fetch_fault fj = kvs_store_verify(s, hit->segs[j].chunk);
            if (fj == KVS_FETCH_GONE || fj == KVS_FETCH_DAMAGED) (*bad)[(*n_bad)++] = kvs_chunk_ref(hit->segs[j].chunk);
        }
        cut_at(hit, i);
        return 1;
    }
    return 0;
}

/* A payload-less chunk for grid span sp of tokens, keyed like the store's. */
static kvs_chunk *stub_for(kvs_store *s, const int32_t *tokens, const kvs_span *sp, const kvs_key *key,
                           const kvs_key *parent) {
    kvs_chunk *c;
    if (kvs_chunk_new(&s->shape, sp->end - sp->start, 0, &c)) return NULL;
    c->prefix_key = *key;
    c->parent_key = *parent;
    kvs_key_content(&s->fp, tokens + sp->start, c->n_tok, &c->content_key);
    c->pos0 = sp->start;
    memcpy(c->tokens, tokens + sp->start, (size_t)c->n_tok * sizeof(int32_t));
    return c;
}

/* A chunk of tier ti joins the hit as span p (hit->n_cached is inside it):
 * pinned (the reference passes to the hit), counted, indexed in RAM under
 * its token path: the prompt's tokens before it, then its own (a chunk a
 * Redis marker led to runs past the span, maybe past the prompt). */
static void join(kvs_store *s, int ti, kvs_chunk *c, const int32_t *tokens, int end, kvs_prefix_hit *hit) {
    const int32_t *path = tokens;
    int32_t *longer = NULL;
    if (c->pos0 + c->n_tok > end) {
        longer = malloc((size_t)(c->pos0 + c->n_tok) * sizeof *longer);
        if (longer) {
            memcpy(longer, tokens, (size_t)c->pos0 * sizeof *longer);
            memcpy(longer + c->pos0, c->tokens, (size_t)c->n_tok * sizeof *longer);
        }
        path = longer;
    }
    if (path) kvs_store_index_from_tier(s, c, path, ti);
    free(longer);
    hit->n_cached = end;
    ADD(s->tier_key_hits, 1);
    if (c->pos0 + c->n_tok > end) ADD(s->tier_partial_hits, 1);
}

/* Span p read by key from tier ti straight into kv (get_into). 1 if it
 * joined the hit. */
static int take_into(kvs_store *s, int ti, const int32_t *tokens, const kvs_span *p, const kvs_key *key,
                     const kvs_key *parent, const kvs_kv_buffer *kv, kvs_prefix_hit *hit, int *cap) {
    kvs_tier *t = s->tiers[ti];
    kvs_chunk *c = stub_for(s, tokens, p, key, parent);
    int from = hit->n_cached;
    uint64_t t0 = kvs_store_mono_ns();
    const int rc = c ? t->ops->get_into(t, c, from - p->start, p->end - from, kv, from) : KVS_ERR_NOMEM;
    kvs_fetch_fault f = kvs_store_fault_of(rc);
    /* damage met by key is the tier's to count (its stats; the dir's
     * scan counted it already): disk_bad counts indexed entries */
    if (c && f != KVS_FETCH_DAMAGED) kvs_store_count_fetch(s, ti, c, rc, t0);
    if (f != KVS_FETCH_OK || push_seg(hit, cap, c, from, p->end)) {
        kvs_chunk_unref(c);
        return 0;
    }
    join(s, ti, c, tokens, p->end, hit);
    return 1;
}

/* Where a longer chunk stops serving a prompt of n tokens: c (starting at
 * the span) matches the prompt for its first `from_tok` tokens at least;
 * returns the end of the run of matching tokens, within the prompt. */
static int matching_end(const kvs_chunk *c, const int32_t *tokens, int n, int from_tok) {
    int m = from_tok;
    while (m < c->n_tok && c->pos0 + m < n && c->tokens[m] == tokens[c->pos0 + m]) m++;
    return c->pos0 + m;
}

/* c (a resident chunk tier ti returned for span p, or NULL) checked against
 * the span, copied into kv if there is one, joined. 1 if it joined the hit;
 * else c is released. c may be longer than the span (a tier's partial-chunk
 * marker led to it, redis_marker.h): it serves the span if it starts there
 * after the same prefix (parent key) with the span's tokens, and then as
 * far as its tokens go on as the prompt's (n tokens): past the span, *ext
 * = 1 and *ext_key = the prefix key where it stops (a writer of longer
 * chunks had served a reader of shorter ones one span: 15 of 300 tokens). */
static int take_resident(kvs_store *s, int ti, kvs_chunk *c, const int32_t *tokens, int n_prompt, const kvs_span *p,
                         const kvs_key *parent, const kvs_kv_buffer *kv, kvs_prefix_hit *hit, int *cap, uint64_t t0,
                         int *ext, kvs_key *ext_key) {
    int from = hit->n_cached, n = p->end - p->start;
    *ext = 0;
    int ok = c && c->kv && c->pos0 == p->start &&
             (c->n_tok == n || (c->n_tok > n && kvs_key_equal(&c->parent_key, parent))) &&
             kvs_kv_shape_equal(&c->shape, &s->shape) &&
             !memcmp(c->tokens, tokens + p->start, (size_t)n * sizeof(int32_t));
    const int end = ok && c->n_tok > n ? matching_end(c, tokens, n_prompt, n) : p->end;
    ok = ok && (!kv || kvs_chunk_copy_to_kv(c, from - p->start, end - from, kv, from) == KVS_OK) &&
         push_seg(hit, cap, c, from, end) == KVS_OK;
    if (!ok) {
        kvs_chunk_unref(c);
        return 0;
    }
    if (end > p->end) {
        *ext = 1;
        if (end == c->pos0 + c->n_tok) *ext_key = c->prefix_key;
        else kvs_key_prefix(&c->parent_key, c->tokens, end - c->pos0, ext_key);
    }
    kvs_store_count_fetch(s, ti, c, KVS_OK, t0);
    join(s, ti, c, tokens, end, hit);
    return 1;
}

/* Step 3 for one tier: serves spans [*i, n_spans) while it has them (the
 * first span's parent is root). A longer chunk that served past its span
 * ends the run: *ext = 1, *ext_key = the key where it stopped. */
static void serve_tier(kvs_store *s, int ti, const int32_t *tokens, int n_prompt, const kvs_span *sp,
                       const kvs_key *keys, const kvs_key *root, int n_spans, int *i, const kvs_kv_buffer *kv,
                       kvs_prefix_hit *hit, int *cap, int *ext, kvs_key *ext_key) {
    kvs_tier *t = s->tiers[ti];
    int want = n_spans - *i;
    *ext = 0;
    if (kv && t->ops->get_into) {
        uint8_t *present = calloc((size_t)want, 1);
        if (!present || t->ops->contains_many(t, keys + *i, want, present) != KVS_OK) want = 0;
        for (int j = 0; j < want && present[j] == KVS_TIER_HELD; j++) {
            if (!take_into(s, ti, tokens, &sp[*i], &keys[*i], *i ? &keys[*i - 1] : root, kv, hit, cap)) break;
            (*i)++;
        }
        free(present);
        return;
    }
    uint64_t t0 = kvs_store_mono_ns();
    kvs_chunk **got = calloc((size_t)want, sizeof *got);
    if (!got || t->ops->get_many(t, keys + *i, want, got) != KVS_OK) {
        free(got);
        return;
    }
    int ok = 1;
    for (int j = 0; j < want; j++) {
        if (!ok || *ext) { /* after the first miss, or past the grid: the rest is not used */
            kvs_chunk_unref(got[j]);
            continue;
        }
        ok = take_resident(s, ti, got[j], tokens, n_prompt, &sp[*i], *i ? &keys[*i - 1] : root, kv, hit, cap, t0,
                           ext, ext_key); /* releases it if not */
        if (ok) (*i)++;
    }
    free(got);
}

/* Reads of held tail lengths a tier gets in step 4 (the longest two: the
 * second serves where the longest is damaged). */
#define TAIL_READS 2

/* Step 4: the partial chunk [stop->start, stop->start + j) that the tiers
 * may hold where the grid run stopped (stop: the grid span no tier served;
 * parent: the prefix key before it). Lengths j from the first that extends
 * the hit to stop's own length - 1 (that one was asked in step 3), longest
 * first: one contains_many per tier for all of them, then reads of the held
 * ones until one serves, TAIL_READS at most. */
static int serve_tail(kvs_store *s, const int32_t *tokens, int n_prompt, const kvs_span *stop, const kvs_key *parent,
                      const kvs_kv_buffer *kv, kvs_prefix_hit *hit, int *cap, kvs_key *served_key) {
    const int lo = hit->n_cached - stop->start + 1, hi = stop->end - stop->start - 1;
    if (hi < lo) return KVS_OK;
    const int m = hi - lo + 1; /* keys[k]: the tail of lo + k tokens */
    kvs_key *keys = malloc((size_t)m * sizeof *keys);
    uint8_t *present = malloc((size_t)m);
    if (!keys || !present) {
        free(keys);
        free(present);
        return kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    }
    kvs_key_prefix_lengths(parent, tokens + stop->start, lo, hi, keys);
    int served = 0;
    for (int ti = 0; ti < s->n_tiers && !served; ti++) {
        kvs_tier *t = s->tiers[ti];
        if (t->ops->contains_many(t, keys, m, present) != KVS_OK) continue;
        for (int k = m - 1, reads = 0; k >= 0 && !served && reads < TAIL_READS; k--) {
            if (present[k] != KVS_TIER_HELD) continue;
            reads++;
            const kvs_span p = {stop->start, stop->start + lo + k, KVS_SPAN_PARTIAL};
            int ext = 0;
            if (kv && t->ops->get_into) {
                served = take_into(s, ti, tokens, &p, &keys[k], parent, kv, hit, cap);
            } else {
                kvs_chunk *c = NULL;
                uint64_t t0 = kvs_store_mono_ns();
                if (t->ops->get_many(t, &keys[k], 1, &c) == KVS_OK)
                    served = take_resident(s, ti, c, tokens, n_prompt, &p, parent, kv, hit, cap, t0, &ext,
                                           served_key);
            }
            if (served && !ext) *served_key = keys[k];
        }
    }
    free(keys);
    free(present);
    return KVS_OK;
}

/* Steps 3 and 4 from position g, whose prefix key is root: the grid
 * chunks of [g, n) by key (the first one up to the next grid line), then
 * the partial chunk where they stop. 1 in *tail if step 4 served (the hit
 * then ends at a key it names: *tail_key). */
static int serve_round(kvs_store *s, const int32_t *tokens, int n, int g, const kvs_key *root,
                       const kvs_kv_buffer *kv, kvs_prefix_hit *hit, int *cap, int *tail, kvs_key *tail_key) {
    int cap_spans = kvs_chunking_max_spans(n - g, s->chunk_tokens, 0), n_spans = 0;
    kvs_span *sp = malloc((size_t)cap_spans * sizeof *sp);
    kvs_key *keys = malloc((size_t)cap_spans * sizeof *keys);
    int rc = sp && keys ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    if (!rc) rc = kvs_chunking_split(n - g, g, s->chunk_tokens, NULL, 0, sp, cap_spans, &n_spans);
    if (!rc) rc = kvs_key_prefix_chain(root, tokens + g, sp, n_spans, keys);
    for (int i = 0; !rc && i < n_spans; i++) { /* to absolute positions */
        sp[i].start += g;
        sp[i].end += g;
    }
    int i = 0, ext = 0;
    while (!rc && i < n_spans && sp[i].end <= hit->n_cached) i++;
    for (int ti = 0; !rc && !ext && ti < s->n_tiers && i < n_spans; ti++)
        serve_tier(s, ti, tokens, n, sp, keys, root, n_spans, &i, kv, hit, cap, &ext, tail_key);
    *tail = ext; /* a longer chunk went past the grid: the next round starts where it stopped */
    if (!rc && !ext && i < n_spans) {
        const int before = hit->n_cached;
        rc = serve_tail(s, tokens, n, &sp[i], i ? &keys[i - 1] : root, kv, hit, cap, tail_key);
        *tail = hit->n_cached > before;
    }
    free(sp);
    free(keys);
    return rc;
}

/* The prefix key at the end of the hit: its last chunk's, or that of the
 * part of it the hit covers. */
static void key_at_hit_end(const kvs_store *s, const kvs_prefix_hit *hit, kvs_key *out) {
    if (!hit->n_segs) {
        *out = s->fp;
        return;
    }
    const kvs_hit_seg *g = &hit->segs[hit->n_segs - 1];
    if (g->to == g->chunk->pos0 + g->chunk->n_tok) *out = g->chunk->prefix_key;
    else kvs_key_prefix(&g->chunk->parent_key, g->chunk->tokens, g->to - g->chunk->pos0, out);
}

/* The prefix key of tokens [0, n) cut on the grid (n on it). */
static void grid_key_at(const kvs_store *s, const int32_t *tokens, int n, kvs_key *out) {
    *out = s->fp;
    for (int at = 0; at < n; at += s->chunk_tokens) {
        kvs_key next;
        kvs_key_prefix(out, tokens + at, s->chunk_tokens, &next);
        *out = next;
    }
}

/* Rounds a lookup makes in the tiers at most (each a few round trips). */
#define TIER_ROUNDS 64

/* Steps 3 and 4, in rounds. The first from position 0 on the grid (the
 * chain any process writes for a plain prompt). A stored chain may leave
 * the grid: a prompt stored with its segment borders (documents under
 * `reuse: full`: [0, 10) [10, 64) [64, 128) ...), or by a process with
 * other chunk_tokens. Its chunks after the border are keyed from the
 * border's key, which no grid key names: where step 4 served a partial
 * chunk, the next round starts at its end, from its key (they had been
 * lost: Redis served the system message of such a prompt, RAM and a
 * scanned directory all of it). Where the first round found nothing past
 * a RAM hit whose chain is not the grid's, one more starts at its end. */
static int serve_tiers(kvs_store *s, const int32_t *tokens, int n, const kvs_kv_buffer *kv, kvs_prefix_hit *hit,
                       int *cap) {
    int g = 0, rc = KVS_OK, tried_hit_end = 0;
    kvs_key root = s->fp;
    for (int round = 0; !rc && round < TIER_ROUNDS && hit->n_cached < n; round++) {
        const int before = hit->n_cached;
        int tail = 0;
        kvs_key tail_key;
        rc = serve_round(s, tokens, n, g, &root, kv, hit, cap, &tail, &tail_key);
        if (rc) break;
        if (tail) { /* a partial chunk, or a longer chunk: the chain may go on from its key there */
            g = hit->n_cached;
            root = tail_key;
            continue;
        }
        if (hit->n_cached > before || tried_hit_end || !hit->n_cached || hit->n_cached == g) break;
        /* Nothing past the RAM hit: once more from its end, from its own
         * key, where that is not the grid's key there (a RAM chain with
         * borders: the tiers may continue it) */
        kvs_key at_end, grid;
        key_at_hit_end(s, hit, &at_end);
        if (hit->n_cached % s->chunk_tokens == 0) {
            grid_key_at(s, tokens, hit->n_cached, &grid);
            if (kvs_key_equal(&grid, &at_end)) break;
        }
        g = hit->n_cached;
        root = at_end;
        tried_hit_end = 1;
    }
    return rc;
}

/* Step 5, where the hit ends short of the prompt: the index may hold the
 * prompt's grid chunks past it, tier entries whose parent was damaged or
 * vanished (a scan indexes them by key, reachable by no path). They are
 * verified as step 2 verifies the rest of its path, the failed ones added
 * to *bad, so that the request stores every damaged chunk of its prompt
 * again (the put skips a chunk the index holds: payload damage past a
 * header-damaged entry had stayed until a later request reached it). */
static int verify_past_hit(kvs_store *s, const int32_t *tokens, int n, const kvs_prefix_hit *hit, kvs_chunk ***bad,
                           int *n_bad) {
    int cap = kvs_chunking_max_spans(n, s->chunk_tokens, 0), n_spans = 0;
    kvs_span *sp = malloc((size_t)cap * sizeof *sp);
    kvs_key *keys = malloc((size_t)cap * sizeof *keys);
    int rc = sp && keys ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    if (!rc) rc = kvs_chunking_split(n, 0, s->chunk_tokens, NULL, 0, sp, cap, &n_spans);
    int first = 0;
    while (!rc && first < n_spans && sp[first].start < hit->n_cached) first++;
    if (!rc && first < n_spans) rc = kvs_key_prefix_chain(&s->fp, tokens, sp, n_spans, keys);
    for (int i = first; !rc && i < n_spans; i++) {
        pthread_rwlock_rdlock(&s->lock);
        kvs_chunk *c = kvs_chunk_map_find(&s->pmap, &keys[i]);
        for (int j = 0; c && j < *n_bad; j++)
            if ((*bad)[j] == c) c = NULL; /* step 2 verified it */
        if (c && (c->store_flags & SF_VERIFIED)) c = NULL; /* an earlier lookup did (a peek each scheduler pass
                                                            * had read every one again) */
        if (c) kvs_chunk_ref(c);
        pthread_rwlock_unlock(&s->lock);
        if (!c) continue;
        const kvs_fetch_fault f = kvs_store_verify(s, c);
        if (f == KVS_FETCH_OK) {
            pthread_rwlock_wrlock(&s->lock);
            c->store_flags |= SF_VERIFIED;
            pthread_rwlock_unlock(&s->lock);
        }
        kvs_chunk **more = f == KVS_FETCH_GONE || f == KVS_FETCH_DAMAGED ? realloc(*bad, (size_t)(*n_bad + 1) * sizeof **bad)
                                                                           : NULL;
        if (more) {
            *bad = more;
            (*bad)[(*n_bad)++] = c;
        } else {
            kvs_chunk_unref(c);
        }
    }
    free(sp);
    free(keys);
    return rc;
}

static int lookup(kvs_store *s, const int32_t *tokens, int n, const kvs_kv_buffer *kv, kvs_prefix_hit *hit) {
    uint64_t t0 = kvs_store_mono_ns();
    memset(hit, 0, sizeof *hit);
    hit->n_tokens = n;
    if (n < 0 || (n && !tokens)) return kvs_error(KVS_ERR_INVALID_ARG, "store lookup: %d tokens", n);
    if (kv) {
        kvs_kv_shape ks = kvs_kv_buffer_shape(kv);
        if (!kvs_kv_shape_equal(&ks, &s->shape) || kv->n_ctx < n)
            return kvs_error(KVS_ERR_INVALID_ARG,
                             "store lookup: %d tokens into a KV buffer of %d slots or another shape", n, kv->n_ctx);
    }
    int cap = 0;
    kvs_chunk **bad = NULL;
    int n_bad = 0;
    int rc = from_index(s, tokens, n, hit, &cap);
    int cut = rc ? 1 : serve_index(s, kv, hit, &bad, &n_bad);
    if (!rc && !cut && s->n_tiers && hit->n_cached < n) rc = serve_tiers(s, tokens, n, kv, hit, &cap);
    /* (not past a transient failure: the tier is slow or down) */
    if (!rc && s->n_tiers && hit->n_cached < n && (!cut || n_bad))
        rc = verify_past_hit(s, tokens, n, hit, &bad, &n_bad);
    /* Last to first, what the tiers served too (indexed first to last): the
     * head of the chain ends up most recently used, so eviction and the
     * records' bound take tails first and never cut a chain short. */
    for (int i = hit->n_segs - 1; i >= 0; i--) kvs_store_touch(s, hit->segs[i].chunk);
    kvs_store_drop(s, bad, n_bad);
    free(bad);
    if (rc) {
        kvs_prefix_hit_release(hit);
        hit->n_tokens = n;
        return rc;
    }
    if (!kv) kvs_store_enforce_budget(s); /* (into a buffer: at kvs_store_release_hit, once unpinned) */
    ADD(s->lookups, 1);
    ADD(s->lookup_tokens, n);
    if (hit->n_cached > 0) {
        ADD(s->hits, 1);
        ADD(s->hit_tokens, hit->n_cached);
    } else {
        ADD(s->misses, 1);
    }
    ADD(s->lookup_ns, kvs_store_mono_ns() - t0);
    return KVS_OK;
}

int kvs_store_lookup_prefix(kvs_store *s, const int32_t *tokens, int n, kvs_prefix_hit *hit) {
    return lookup(s, tokens, n, NULL, hit);
}

int kvs_store_lookup_into(kvs_store *s, const int32_t *tokens, int n, kvs_kv_buffer *kv, kvs_prefix_hit *hit) {
    if (!kv) return kvs_error(KVS_ERR_INVALID_ARG, "store lookup: no KV buffer");
    kvs_kv_recal_end(kv, 0); /* slots from 0 get another sequence's KV */
    const kvs_kv_exact *e = kv->exact;
    const int held = e ? e->len : 0, same = kvs_kv_exact_match(kv, tokens, n);
    int rc = lookup(s, tokens, n, kv, hit);
    /* The hit is the KV a cold prefill of its tokens writes: exact. Where
     * the buffer held all n tokens' exact KV already and the hit is whole,
     * the same bytes went back and what it held past them still stands. A
     * hit that ended short may have ended on a read that failed after it
     * wrote (a checksum is known at the end of a read): the slots past it
     * are exact no longer. */
    if (rc == KVS_OK && e && hit->n_cached > 0) {
        if (hit->n_cached == n && n <= same) {
            kv->exact->len = held;
        } else {
            memcpy(kv->exact->tok, tokens, (size_t)hit->n_cached * sizeof *tokens);
            kv->exact->len = hit->n_cached;
        }
    }
    return rc;
}

int kvs_store_peek_prefix(kvs_store *s, const int32_t *tokens, int n, int *n_hit) {
    *n_hit = 0;
    if (n < 0 || (n && !tokens)) return kvs_error(KVS_ERR_INVALID_ARG, "store peek: %d tokens", n);
    kvs_prefix_hit hit;
    memset(&hit, 0, sizeof hit);
    int cap = 0;
    int rc = from_index(s, tokens, n, &hit, &cap);
    if (!rc && s->n_tiers && hit.n_cached < n) rc = serve_tiers(s, tokens, n, NULL, &hit, &cap);
    if (!rc) *n_hit = hit.n_cached;
    kvs_prefix_hit_release(&hit);
    return rc;
}

void kvs_prefix_hit_release(kvs_prefix_hit *hit) {
    if (!hit) return;
    for (int i = 0; i < hit->n_segs; i++) kvs_chunk_unref(hit->segs[i].chunk);
    free(hit->segs);
    memset(hit, 0, sizeof *hit);
}

void kvs_store_release_hit(kvs_store *s, kvs_prefix_hit *hit) {
    kvs_prefix_hit_release(hit);
    if (s) kvs_store_enforce_budget(s);
}

int kvs_prefix_hit_copy_to_kv(const kvs_prefix_hit *hit, const kvs_kv_buffer *kv) {
    for (int i = 0; i < hit->n_segs; i++) {
        const kvs_hit_seg *g = &hit->segs[i];
        int rc = kvs_chunk_copy_to_kv(g->chunk, g->from - g->chunk->pos0, g->to - g->from, kv, g->from);
        if (rc) return rc;
    }
    return KVS_OK;
}

/* The two key lookups: find under the read lock, pin, then fetch. */
static int lookup_key(kvs_store *s, const kvs_key *k, int content, kvs_chunk **out) {
    uint64_t t0 = kvs_store_mono_ns();
    pthread_rwlock_rdlock(&s->lock);
    kvs_chunk *c = kvs_chunk_map_find(content ? &s->cmap : &s->pmap, k);
    if (c) kvs_chunk_ref(c);
    pthread_rwlock_unlock(&s->lock);
    if (c) {
        kvs_fetch_fault f = kvs_store_fetch(s, c, NULL, 0, 0, 0);
        if (f == KVS_FETCH_OK) {
            kvs_store_touch(s, c);
        } else {
            if (f == KVS_FETCH_TRANSIENT) kvs_chunk_unref(c);
            else kvs_store_drop(s, &c, 1);
            c = NULL;
        }
    }
    if (content) {
        ADD(s->lookups, 1);
        if (c) ADD(s->hits, 1);
        else ADD(s->misses, 1);
        ADD(s->lookup_ns, kvs_store_mono_ns() - t0);
    }
    if (!c) /* a miss, no failure: no message (it had outlived the successful request that missed) */
        return KVS_ERR_NOT_FOUND;
    kvs_store_enforce_budget(s);
    *out = c;
    return KVS_OK;
}

int kvs_store_lookup_content(kvs_store *s, const kvs_key *content_key, kvs_chunk **out) {
    return lookup_key(s, content_key, 1, out);
}

int kvs_store_get(kvs_store *s, const kvs_key *prefix_key, kvs_chunk **out) {
    return lookup_key(s, prefix_key, 0, out);
}

/* The first tier (in order) whose chunk under key k is resident, of the
 * store's shape and ends path[0..n_path) (any, path NULL): indexed under
 * the path, pinned. */
static kvs_chunk *from_tiers_by_key(kvs_store *s, const kvs_key *k, const int32_t *path, int n_path) {
    for (int ti = 0; ti < s->n_tiers; ti++) {
        kvs_chunk *c = NULL;
        uint64_t t0 = kvs_store_mono_ns();
        if (kvs_tier_get_many(s->tiers[ti], k, 1, &c) != KVS_OK || !c) continue;
        if (c->kv && kvs_key_equal(&c->prefix_key, k) && kvs_kv_shape_equal(&c->shape, &s->shape) &&
            c->pos0 >= 0 && c->n_tok > 0 &&
            (!path || (c->pos0 + c->n_tok == n_path &&
                       !memcmp(c->tokens, path + c->pos0, (size_t)c->n_tok * sizeof *path)))) {
            kvs_store_count_fetch(s, ti, c, KVS_OK, t0);
            kvs_store_index_from_tier(s, c, path, ti);
            ADD(s->tier_key_hits, 1);
            return c;
        }
        kvs_chunk_unref(c);
    }
    return NULL;
}

int kvs_store_get_path(kvs_store *s, const kvs_key *prefix_key, const int32_t *path, int n_path, kvs_chunk **out) {
    int st = lookup_key(s, prefix_key, 0, out);
    if (st != KVS_ERR_NOT_FOUND || !s->n_tiers || (path && n_path <= 0)) return st;
    kvs_chunk *c = from_tiers_by_key(s, prefix_key, path, n_path);
    if (!c) return st;
    kvs_store_enforce_budget(s);
    *out = c;
    return KVS_OK;
}
