/* Sampling chain (order and determinism described in sampler.h). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/sampler.h"

struct kvs_sampler {
    kvs_sampler_params p;
    int n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    float *logits;     /* (n_vocab) working copy */
    int32_t *ids;      /* (n_vocab) candidate ids, best first */
    int32_t *heap;     /* (n_vocab) top-k scratch */
    float *probs;      /* (n_vocab) candidate probabilities */
    /* The repetition penalty's window: a ring of the last repeat_last_n
     * tokens, allocated as it fills (a window of INT_MAX had allocated 8 GiB
     * at once); it only grows before it first wraps, so growing keeps the
     * order. */
    int32_t *hist;
    int hist_cap, n_hist, hist_pos;
    int grow_failed;   /* the window could not grow: kvs_sampler_sample fails */
    uint32_t *stamp;   /* (n_vocab, with a penalty) the last sample a token was penalised in */
    uint32_t n_stamp;
    /* Presence/frequency penalties (only when one is nonzero): how often
     * each id was generated, and the distinct ids in order of first use, so
     * a step touches only those logits. */
    int32_t *counts;   /* (n_vocab) */
    int32_t *used;     /* (n_vocab) */
    int n_used;
};

kvs_sampler_params kvs_sampler_default_params(void) {
    kvs_sampler_params p;
    p.temperature = 0.0f; /* greedy unless asked: reproducible by default */
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = 0;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

void kvs_sampler_reset(kvs_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->n_hist = s->hist_pos = s->grow_failed = 0;
    for (int i = 0; i < s->n_used; i++) s->counts[s->used[i]] = 0;
    s->n_used = 0;
}

static int has_counts(const kvs_sampler_params *p) { return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f; }

/* The accepted range of every field, checked by kvs_sampler_params_check:
 * a value outside it is refused naming the field (top_p 0 or min_p 2 had
 * been silent greedy draws, temperature inf a uniform one). The CLI's and
 * the server's ranges lie inside these. */
typedef struct float_field {
    const char *name;
    size_t off;
    float lo, hi;     /* inclusive unless lo_open */
    int lo_open;
    const char *range; /* for the message */
} float_field;

#define FF(f, lo, hi, open, range) {#f, offsetof(kvs_sampler_params, f), lo, hi, open, range}
static const float_field k_float_fields[] = {
    FF(temperature, -HUGE_VALF, HUGE_VALF, 0, "a finite number (<= 0: greedy)"),
    FF(top_p, 0.0f, 1.0f, 1, "in (0, 1] (1 = off)"),
    FF(min_p, 0.0f, 1.0f, 0, "in [0, 1] (0 = off)"),
    FF(repeat_penalty, 0.0f, HUGE_VALF, 1, "a finite number > 0 (1 = off)"),
    FF(presence_penalty, -HUGE_VALF, HUGE_VALF, 0, "a finite number (0 = off)"),
    FF(frequency_penalty, -HUGE_VALF, HUGE_VALF, 0, "a finite number (0 = off)"),
};
#undef FF

int kvs_sampler_params_check(const kvs_sampler_params *p, const char *who) {
    for (size_t i = 0; i < sizeof k_float_fields / sizeof k_float_fields[0]; i++) {
        const float_field *f = &k_float_fields[i];
        float v;
        memcpy(&v, (const char *)p + f->off, sizeof v);
        if (!isfinite(v) || v < f->lo || v > f->hi || (f->lo_open && v == f->lo))
            return kvs_error(KVS_ERR_INVALID_ARG, "%s%s must be %s, got %g", who, f->name, f->range, (double)v);
    }
    if (p->top_k < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "%stop_k must be >= 0 (0 = off), got %d", who, p->top_k);
    if (p->repeat_last_n < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "%srepeat_last_n must be >= 0, got %d", who, p->repeat_last_n);
    return KVS_OK;
}

/* Tokens the window holds before it first grows. */
#define HIST_FIRST 256

int kvs_sampler_new(kvs_sampler_params p, int n_vocab, kvs_sampler **out) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_sampler_new: out is NULL");
    if (n_vocab <= 0) return kvs_error(KVS_ERR_INVALID_ARG, "sampler: n_vocab %d", n_vocab);
    int st = kvs_sampler_params_check(&p, "sampler: ");
    if (st) return st;
    kvs_sampler *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_NOMEM, "sampler: out of memory");
    s->p = p;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->logits = malloc(n * sizeof *s->logits);
    s->ids = malloc(n * sizeof *s->ids);
    s->heap = malloc(n * sizeof *s->heap);
    s->probs = malloc(n * sizeof *s->probs);
    s->hist_cap = p.repeat_last_n < HIST_FIRST ? p.repeat_last_n : HIST_FIRST;
    s->hist = malloc(((size_t)s->hist_cap + 1) * sizeof *s->hist);
    if (p.repeat_penalty != 1.0f) s->stamp = calloc(n, sizeof *s->stamp);
    if (has_counts(&p)) {
        s->counts = calloc(n, sizeof *s->counts);
        s->used = malloc(n * sizeof *s->used);
    }
    if (!s->logits || !s->ids || !s->heap || !s->probs || !s->hist || (p.repeat_penalty != 1.0f && !s->stamp) ||
        (has_counts(&p) && (!s->counts || !s->used))) {
        kvs_sampler_free(s);
        return kvs_error(KVS_ERR_NOMEM, "sampler: out of memory");
    }
    kvs_sampler_reset(s);
    *out = s;
    return KVS_OK;
}

void kvs_sampler_free(kvs_sampler *s) {
    if (!s) return;
    free(s->logits);
    free(s->ids);
    free(s->heap);
    free(s->probs);
    free(s->hist);
    free(s->stamp);
    free(s->counts);
    free(s->used);
    free(s);
}

void kvs_sampler_accept(kvs_sampler *s, int32_t token) {
    if (!s) return;
    if (s->counts && token >= 0 && token < s->n_vocab && s->counts[token]++ == 0) s->used[s->n_used++] = token;
    kvs_sampler_accept_prompt(s, token);
}

void kvs_sampler_accept_prompt(kvs_sampler *s, int32_t token) {
    if (!s) return;
    int cap = s->p.repeat_last_n;
    if (cap == 0) return;
    if (s->n_hist == s->hist_cap && s->hist_cap < cap) { /* not wrapped yet: hist_pos == n_hist */
        int grown = s->hist_cap > cap / 2 ? cap : 2 * s->hist_cap;
        int32_t *h = realloc(s->hist, ((size_t)grown + 1) * sizeof *h);
        if (!h) {
            s->grow_failed = 1;
            return;
        }
        s->hist = h;
        s->hist_cap = grown;
    }
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % cap;
    if (s->n_hist < cap) s->n_hist++;
}

/* a ranks before b: larger value, then lower id. NaN ranks last. */
static int better(const float *x, int32_t a, int32_t b) {
    float xa = x[a], xb = x[b];
    if (isnan(xa)) return isnan(xb) && a < b; /* NaN last, the lower id first among them (a strict order) */
    if (isnan(xb)) return 1;
    return xa > xb || (xa == xb && a < b);
}

/* Min-heap by rank: heap[0] is the worst of the kept ids. */
static void sift_down(const float *x, int32_t *h, int n, int i) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && better(x, h[c], h[c + 1])) c++;
        if (!better(x, h[i], h[c])) return;
        int32_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

void kvs_top_k_ids(const float *x, int n, int k, int32_t *out, int32_t *heap) {
    if (k <= 0) return;
    int size = 0;
    for (int32_t i = 0; i < n; i++) {
        if (size < k) {
            heap[size] = i;
            /* sift up */
            for (int j = size++; j > 0;) {
                int p = (j - 1) / 2;
                if (!better(x, heap[p], heap[j])) break;
                int32_t t = heap[p];
                heap[p] = heap[j];
                heap[j] = t;
                j = p;
            }
        } else if (better(x, i, heap[0])) {
            heap[0] = i;
            sift_down(x, heap, size, 0);
        }
    }
    /* Pop the worst first into the back of out. */
    for (int j = size - 1; j >= 0; j--) {
        out[j] = heap[0];
        heap[0] = heap[j];
        sift_down(x, heap, j, 0);
    }
}

/* One logit's log-probability given the log-sum-exp: with n_inf +inf
 * logits those share it (-log n_inf) and the rest get -inf; a NaN logit
 * gives NaN. */
static float logprob_of(float x, double lse, int n_inf) {
    if (n_inf) return x == INFINITY ? (float)-log((double)n_inf) : x == x ? -INFINITY : x;
    return (float)((double)x - lse);
}

int kvs_logprobs(const float *logits, int n_vocab, int32_t token, float *token_logprob, int n_top, int32_t *top_ids,
                 float *top_logprobs) {
    if (!logits || n_vocab <= 0 || n_top < 0 || n_top > n_vocab || token >= n_vocab || (token >= 0 && !token_logprob) ||
        (n_top > 0 && (!top_ids || !top_logprobs)))
        return kvs_error(KVS_ERR_INVALID_ARG,
                         "logprobs: need logits, n_vocab > 0, 0 <= n_top <= n_vocab (%d) and a token below it (%d), "
                         "and arrays for what is asked", n_top, (int)token);
    /* The shift: the largest value that is not NaN (NaN compares false). */
    float max = -INFINITY;
    int n_inf = 0; /* +inf logits: they share all of the probability */
    for (int i = 0; i < n_vocab; i++) {
        if (logits[i] > max) max = logits[i];
        n_inf += logits[i] == INFINITY;
    }
    /* NaN logits are left out of the sum (one had made every logprob NaN);
     * all -inf (nothing possible) gives -inf everywhere */
    double sum = 0.0;
    for (int i = 0; !n_inf && max > -INFINITY && i < n_vocab; i++)
        if (logits[i] == logits[i]) sum += exp((double)logits[i] - max);
    const double lse = n_inf || max == -INFINITY ? 0.0 : (double)max + log(sum);
    if (token >= 0) *token_logprob = logprob_of(logits[token], lse, n_inf);
    if (n_top == 0) return KVS_OK;
    int32_t small[64], *heap = n_top <= 64 ? small : malloc((size_t)n_top * sizeof *heap);
    if (!heap) return kvs_error(KVS_ERR_NOMEM, "logprobs: out of memory for %d ids", n_top);
    kvs_top_k_ids(logits, n_vocab, n_top, top_ids, heap);
    if (heap != small) free(heap);
    for (int i = 0; i < n_top; i++) top_logprobs[i] = logprob_of(logits[top_ids[i]], lse, n_inf);
    return KVS_OK;
}

static void apply_penalty(kvs_sampler *s) {
    if (s->p.repeat_penalty == 1.0f) return;
    if (++s->n_stamp == 0) { /* wrapped: no stale stamp may equal the new one */
        memset(s->stamp, 0, (size_t)s->n_vocab * sizeof *s->stamp);
        s->n_stamp = 1;
    }
    for (int i = 0; i < s->n_hist; i++) {
        int32_t t = s->hist[i];
        if (t < 0 || t >= s->n_vocab) continue;
        if (s->stamp[t] == s->n_stamp) continue; /* each distinct token is penalised once (had been O(n^2)) */
        s->stamp[t] = s->n_stamp;
        float *l = &s->logits[t];
        *l = *l > 0.0f ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
    }
}

/* OpenAI's: subtracted from each generated id's logit, in first-use order
 * (one float operation per id: the same bits whatever the order). */
static void apply_presence_frequency(kvs_sampler *s) {
    for (int i = 0; i < s->n_used; i++) {
        int32_t t = s->used[i];
        s->logits[t] -= s->p.frequency_penalty * (float)s->counts[t] + s->p.presence_penalty;
    }
}

int32_t kvs_sampler_sample(kvs_sampler *s, const float *logits) {
    if (!s || !logits) /* (both had crashed) */
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_sampler_sample: %s is NULL", !s ? "the sampler" : "logits"), -1;
    if (s->grow_failed)
        return kvs_error(KVS_ERR_NOMEM, "kvs_sampler_sample: out of memory for the repetition window of %d tokens",
                         s->p.repeat_last_n), -1;
    const int n = s->n_vocab;
    memcpy(s->logits, logits, (size_t)n * sizeof *s->logits);
    apply_penalty(s);
    apply_presence_frequency(s);
    const float *x = s->logits;

    /* A temperature whose inverse overflows (a denormal) is greedy too:
     * the softmax below would compute 0 * inf = NaN for the best token. */
    if (s->p.temperature <= 0.0f || !isfinite(1.0f / s->p.temperature)) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (better(x, i, best)) best = i;
        return best;
    }

    int k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    kvs_top_k_ids(x, n, k, s->ids, s->heap);

    /* Softmax over the candidates (sorted, best first) at the temperature. */
    const float inv_t = 1.0f / s->p.temperature;
    const float top = x[s->ids[0]];
    double sum = 0.0;
    for (int i = 0; i < k; i++) {
        /* a top of +inf (or every candidate -inf): its equals share the
         * mass, as kvs_logprobs gives it (inf - inf had made the best 0, and
         * the draw the last candidate: the least likely token) */
        float p = isinf(top) ? (x[s->ids[i]] == top ? 1.0f : 0.0f) : expf((x[s->ids[i]] - top) * inv_t);
        if (isnan(p)) p = 0.0f;
        s->probs[i] = p;
        sum += p;
    }
    /* top-p: the smallest prefix holding top_p of the mass. */
    int keep = k;
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < k; i++) {
            cum += s->probs[i] / sum;
            if (cum >= s->p.top_p) { keep = i + 1; break; }
        }
    }
    /* min-p: drop candidates below min_p times the best probability
     * (probs[0] is the best: it is exp(0) = 1 before normalising). */
    if (s->p.min_p > 0.0f) {
        int j = 1;
        while (j < keep && s->probs[j] >= s->p.min_p * s->probs[0]) j++;
        keep = j;
    }
    double total = 0.0;
    for (int i = 0; i < keep; i++) total += s->probs[i];
    double u = (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53 * total;
    double cum = 0.0;
    for (int i = 0; i < keep; i++) {
        cum += s->probs[i];
        if (u < cum) return s->ids[i];
    }
    return s->ids[keep - 1];
}
