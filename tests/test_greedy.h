/* Greedy generation parameters shared by the tests that compare runs bit for
 * bit: temperature 0 (argmax, no sampler state), n_predict tokens, no top
 * logprobs. */
#ifndef KVS_TEST_GREEDY_H
#define KVS_TEST_GREEDY_H

#include <stdint.h>

#include "kvstitch.h"

static inline kvs_generate_params kt_greedy(int n_predict) {
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = n_predict;
    gp.sampling.temperature = 0;
    gp.n_top_logprobs = 0;
    return gp;
}

/* The greedy choice: the first index of the largest of n logits. */
static inline int32_t kt_argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Decode steps: tokens toks[from..from+n) one at a time at positions
 * from.., each step's nv logits at out + (*steps)++ * nv. Does nothing when
 * *st is set; the first failure sets it. */
static inline void kt_decode_steps(kvs_context *ctx, const int32_t *toks, int from, int n, float *out, int nv,
                                   int *steps, int *st) {
    for (int32_t p = from; p < from + n && !*st; p++, (*steps)++)
        *st = kvs_decode(ctx, toks + p, &p, 1, out + (size_t)*steps * nv);
}

#endif
