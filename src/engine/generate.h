/*
 * The generation loop behind kvs_generate and the chunk cache's
 * kvs_generate_cached (src/cache/prefix.c): the caller may have filled the KV of a
 * prompt prefix already.
 */
#ifndef KVS_ENGINE_GENERATE_H
#define KVS_ENGINE_GENERATE_H

#include "kvstitch.h"

/* KVS_OK, or KVS_ERR_INVALID_ARG naming the first field of p out of its
 * range (n_predict, n_top_logprobs, n_stop and stop, the sampling fields);
 * who ("kvs_generate_cached") starts the message. The public entry points
 * call it before any lookup, computation or store. */
int kvs_generate_params_check(const kvs_generate_params *p, const char *who);

/* kvs_generate for a prompt whose first n_ready tokens already have their
 * KV in the context's buffer at slots 0..n_ready-1 (0 <= n_ready < n_prompt,
 * exactly the bytes a prefill would write there): prefills
 * prompt[n_ready..n_prompt) at positions n_ready.. and generates. The sampler
 * sees the whole prompt, as in a cold run. t0 (kvs_now_ms clock) is the
 * request start that ttft_ms counts from. Sets r->n_live = n_prompt - n_ready;
 * the other cache fields are the caller's. */
int kvs_generate_from(kvs_context *ctx, const int32_t *prompt, int n_prompt, int n_ready,
                      const kvs_generate_params *params, double t0, kvs_generate_result *out);

#endif
