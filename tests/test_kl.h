/*
 * First-token KL divergence between two generations (test_repair.c,
 * test_repair_select.c): how far a repair strategy's first distribution lies
 * from the reference (full) one.
 */
#ifndef KVS_TEST_KL_H
#define KVS_TEST_KL_H

#include <math.h>

#include "kvstitch.h"

/* KL(p_ref || p) of the first-token distributions (log-sum-exp, double). */
static inline double kl_first(const kvs_generate_result *ref, const kvs_generate_result *r) {
    int n = ref->n_vocab;
    double mr = -INFINITY, m = -INFINITY, sr = 0, s = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        if (ref->first_logits[i] > mr) mr = ref->first_logits[i];
        if (r->first_logits[i] > m) m = r->first_logits[i];
    }
    for (int i = 0; i < n; i++) {
        sr += exp(ref->first_logits[i] - mr);
        s += exp(r->first_logits[i] - m);
    }
    double lr = mr + log(sr), l = m + log(s);
    for (int i = 0; i < n; i++) {
        double lp = ref->first_logits[i] - lr, lq = r->first_logits[i] - l;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

#endif
