/*
 * kvs_warm: store a prompt's chunks without generating (reuse what is
 * cached, compute the rest, store), and for a text, check whether its
 * tokenization at the end is stable.
 *
 * Why the border check: a later prompt reuses the warmed KV only as far as
 * its token ids agree with the warmed ones. Byte-level BPE merges across the
 * place where the warmed text ends when more text follows ("...end" + "ing"
 * is one word; "\n" + "\n" is one token), so the last tokens of the warmed
 * text may not appear in the longer prompt and the reuse stops before them.
 * The text is tokenized again with a few typical continuations appended; the
 * leading tokens that survive all of them are the ones a continuation is
 * sure to share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "kv/chunking.h"
#include "cache/cache.h"

/* why in out (room cap): whole if it fits, else cut at a word with "..."
 * (a fixed %.150s had cut the reason mid-word: "...; --cach"). */
static void reason_in(const char *why, size_t cap, char *out) {
    if (strlen(why) < cap) {
        snprintf(out, cap, "%s", why);
        return;
    }
    size_t keep = cap > 4 ? cap - 4 : 0;
    while (keep > 0 && why[keep] != ' ') keep--;
    snprintf(out, cap, "%.*s...", (int)keep, why);
}

static int warm_body(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, kvs_warm_report *rep) {
    double t0 = kvs_now_ms();
    if (!ctx || !cache || !tokens || !rep || n <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_warm: need a context, a cache, at least one token (got %d) and a "
                         "report", n);
    if (n > kvs_context_n_ctx(ctx))
        return kvs_error(KVS_ERR_CONTEXT_FULL, "warm: %d tokens do not fit the context of %d", n,
                         kvs_context_n_ctx(ctx));
    int st = kvs_reuse_check_context(ctx, cache);
    if (!st) st = kvs_reuse_check_tokens(ctx, tokens, n);
    if (st) return st;

    kvs_warm_report r;
    memset(&r, 0, sizeof r);
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    kvs_prefix_hit hit;
    memset(&hit, 0, sizeof hit);
    st = pos ? kvs_store_lookup_into(cache->store, tokens, n, kv, &hit)
             : kvs_error(KVS_ERR_NOMEM, "warm: out of memory");
    if (!st && hit.n_cached < n) {
        for (int i = 0; i < n; i++) pos[i] = i;
        /* No logits wanted: only the KV is kept. */
        st = kvs_decode(ctx, tokens + hit.n_cached, pos + hit.n_cached, n - hit.n_cached, NULL);
    }
    int n_cached = hit.n_cached;
    kvs_store_release_hit(cache->store, &hit); /* KV copied: the pins can go before the inserts */
    kvs_put_report put;
    memset(&put, 0, sizeof put);
    if (!st)
        st = kvs_store_put_prefix(cache->store, tokens, n, cache->chunk_tokens, NULL, 0, kv, &put);
    if (!st) {
        r.n_tokens = n;
        r.chunk_tokens = cache->chunk_tokens;
        r.n_chunks = put.n_chunks;
        r.n_stored = put.n_new;
        r.n_write_errors = put.n_write_errors;
        r.n_existing = put.n_existing;
        r.n_cached = n_cached;
        r.n_computed = n - n_cached;
        r.aligned = n % cache->chunk_tokens == 0;
        r.partial_tail = put.partial_tail;
        r.border_stable = 1;
        r.stable_tokens = n;
        if (put.n_write_errors) {
            char head[64], reason[sizeof r.warning];
            const char *tail = "); they are not stored";
            snprintf(head, sizeof head, "%d of %d chunks could not be written to the cache dir (", put.n_write_errors,
                     put.n_chunks);
            reason_in(put.write_error, sizeof r.warning - strlen(head) - strlen(tail), reason);
            const size_t lh = strlen(head), lr = strlen(reason); /* lh + lr + strlen(tail) < sizeof r.warning */
            memcpy(r.warning, head, lh);
            memcpy(r.warning + lh, reason, lr);
            memcpy(r.warning + lh + lr, tail, strlen(tail) + 1);
        }
        else if (put.n_skipped)
            snprintf(r.warning, sizeof r.warning,
                     "%d of %d chunks were not stored (they do not fit the cache budget)", put.n_skipped, put.n_chunks);
        r.ms = kvs_now_ms() - t0;
        *rep = r;
    }
    free(pos);
    return st;
}

int kvs_warm(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, kvs_warm_report *rep) {
    KVS_ERROR_KEPT(warm_body(ctx, cache, tokens, n, rep));
}

/* Tokenizes into a malloc'd array. */
static int tokenize_alloc(const kvs_model *m, const char *text, size_t len, int flags, int32_t **out, int *n) {
    int cap = (int)(len < (1u << 28) ? len : (1u << 28)) + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return kvs_error(KVS_ERR_NOMEM, "warm: out of memory");
    int st = kvs_tokenize(m, text, len, flags, ids, cap, n);
    if (st == KVS_ERR_BUFFER_TOO_SMALL) {
        int32_t *b = realloc(ids, (size_t)*n * sizeof *ids);
        st = b ? kvs_tokenize(m, text, len, flags, (ids = b), *n, n) : kvs_error(KVS_ERR_NOMEM, "warm: out of memory");
    }
    if (st) {
        free(ids);
        return st;
    }
    *out = ids;
    return KVS_OK;
}

/* Continuations a text is commonly followed by: a word after a space, a
 * newline, and letters glued on (a text cut inside a word, or after a
 * trailing space that would join the next word). Punctuation or digits glued
 * on are rare enough that warning about them would be noise. A limit: a
 * word cut in the middle ("Septem") may merge only with the letters that
 * complete it ("ber"), which no fixed probe can know. */
static const char *const probes[] = {" x", "x", "\n"};

/* How many leading tokens of ids[0..n) every probed continuation keeps;
 * *worst = the probe that keeps the fewest. */
static int stable_prefix(const kvs_model *m, const char *text, size_t len, int flags, const int32_t *ids, int n,
                         int *stable, const char **worst) {
    *stable = n;
    *worst = NULL;
    char *buf = malloc(len + 8);
    if (!buf) return kvs_error(KVS_ERR_NOMEM, "warm: out of memory");
    memcpy(buf, text, len);
    int st = KVS_OK;
    for (size_t p = 0; p < sizeof probes / sizeof probes[0] && !st; p++) {
        size_t pl = strlen(probes[p]);
        memcpy(buf + len, probes[p], pl);
        int32_t *ids2;
        int n2;
        if ((st = tokenize_alloc(m, buf, len + pl, flags, &ids2, &n2))) break;
        int k = 0;
        while (k < n && k < n2 && ids[k] == ids2[k]) k++;
        if (k < *stable) {
            *stable = k;
            *worst = probes[p];
        }
        free(ids2);
    }
    free(buf);
    return st;
}

static void describe(const char *probe, char *out, size_t cap) {
    if (!strcmp(probe, "\n")) snprintf(out, cap, "a newline");
    else snprintf(out, cap, "\"%s\"", probe);
}

static int warm_text_body(kvs_context *ctx, kvs_cache *cache, const char *text, size_t len, int flags, kvs_warm_report *rep) {
    if (!ctx || !cache || (!text && len) || !rep)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_warm_text: need a context, a cache, a text and a report");
    const kvs_model *m = kvs_context_model(ctx);
    int32_t *ids = NULL;
    int n = 0;
    int st = tokenize_alloc(m, text, len, flags, &ids, &n);
    if (st) return st;
    if (n == 0) {
        free(ids);
        return kvs_error(KVS_ERR_INVALID_ARG, "warm: the text is empty (no tokens)");
    }
    int stable;
    const char *worst;
    st = stable_prefix(m, text, len, flags, ids, n, &stable, &worst);
    if (!st) st = kvs_warm(ctx, cache, ids, n, rep);
    free(ids);
    if (st) return st;
    rep->stable_tokens = stable;
    rep->border_stable = stable == n;
    if (stable < n && !rep->warning[0]) {
        char what[32];
        describe(worst, what, sizeof what);
        snprintf(rep->warning, sizeof rep->warning,
                 "the last %d token%s may tokenize differently once more text follows (e.g. %s): a prompt that "
                 "continues this text reuses at most %d of its %d tokens",
                 n - stable, n - stable == 1 ? "" : "s", what, stable, n);
    }
    return KVS_OK;
}

int kvs_warm_text(kvs_context *ctx, kvs_cache *cache, const char *text, size_t len, int flags, kvs_warm_report *rep) {
    KVS_ERROR_KEPT(warm_text_body(ctx, cache, text, len, flags, rep));
}
