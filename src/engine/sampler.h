/*
 * Token sampler: repetition penalty -> presence/frequency penalties -> top-k -> temperature -> softmax ->
 * top-p -> min-p -> draw. temperature <= 0 is greedy (argmax after the
 * penalty, lowest id on ties). The draw uses xoshiro256** seeded from
 * params.seed via splitmix64, and every step runs in a fixed order, so the
 * same logits, history and seed give the same token on any machine.
 * Scratch is sized for n_vocab once; sampling allocates nothing.
 */
#ifndef KVS_ENGINE_SAMPLER_H
#define KVS_ENGINE_SAMPLER_H

#include <stdint.h>

#include "kvstitch.h"

typedef struct kvs_sampler kvs_sampler;

int kvs_sampler_new(kvs_sampler_params params, int n_vocab, kvs_sampler **out);
/* KVS_OK, or KVS_ERR_INVALID_ARG naming the first field out of its range
 * (the ranges are written on kvs_sampler_params in kvstitch.h); who
 * prefixes the message ("sampler: ", "kvs_generate: sampling."). */
int kvs_sampler_params_check(const kvs_sampler_params *p, const char *who);
void kvs_sampler_free(kvs_sampler *s);
/* Clears the history and restarts the random stream from the seed. */
void kvs_sampler_reset(kvs_sampler *s);
/* Adds a generated token to the history: the repetition penalty's window
 * and the counts of the presence/frequency penalties. */
void kvs_sampler_accept(kvs_sampler *s, int32_t token);
/* Adds a prompt token: the repetition penalty's window only (OpenAI's
 * penalties look at the generated text). */
void kvs_sampler_accept_prompt(kvs_sampler *s, int32_t token);
/* Picks a token from n_vocab logits (not modified). Does not accept it. */
int32_t kvs_sampler_sample(kvs_sampler *s, const float *logits);

/* Ids of the k largest values of x[0..n) by descending value (lower id first
 * on ties), k <= n. heap is scratch for k ids. */
void kvs_top_k_ids(const float *x, int n, int k, int32_t *out, int32_t *heap);

#endif
