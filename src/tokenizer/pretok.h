/*
 * Pre-tokenizers of byte-level BPE vocabularies: they cut text into words
 * before merges run. Each is a hand-written matcher equivalent to the regex
 * of the reference tokenizer (alternatives tried in order at each position,
 * with the backtracking outcome of the lookaheads worked out by hand):
 *
 *   GPT2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   SMOLLM every \p{N} isolated first (HF Digits(individual_digits)), then GPT2
 *          on each piece between digits (a piece end acts as end of text)
 *   LLAMA3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   QWEN2  as LLAMA3 but \p{N} (one digit per word)
 *
 * (?i:...) is applied to ASCII letters only.
 */
#ifndef KVS_TOKENIZER_PRETOK_H
#define KVS_TOKENIZER_PRETOK_H

#include <stdint.h>

typedef enum kvs_pretok_kind {
    KVS_PRETOK_GPT2 = 0,
    KVS_PRETOK_SMOLLM,
    KVS_PRETOK_LLAMA3,
    KVS_PRETOK_QWEN2,
} kvs_pretok_kind;

/* Maps tokenizer.ggml.pre to a kind. NULL or an unknown name gives GPT2
 * (the classic byte-level split, which every byte-level vocabulary can
 * encode with) and *known = 0. */
kvs_pretok_kind kvs_pretok_from_name(const char *name, int *known);

/* Splits code points cps[0..n) (with fl[i] = kvs_uc_flags(cps[i])) into
 * consecutive words covering all of them. Writes the exclusive end index of
 * each word to ends[] (room for n entries is always enough) and returns the
 * number of words. */
int kvs_pretok_split(kvs_pretok_kind kind, const uint32_t *cps, const uint8_t *fl, int n,
                     int32_t *ends);

#endif
