/*
 * Segmented prompts for non-prefix reuse (RAG): a prompt given as
 *
 *   system   the instructions (live; a later request can hit it by exact prefix)
 *   doc...   retrieved passages: cacheable, position-independent
 *   question the user's question (live)
 *
 * laid out as one token sequence. Every segment is tokenized on its own and
 * the token lists are concatenated, so a doc has the same tokens wherever it
 * appears (its content key does not depend on its neighbours), and a BPE
 * merge across a segment border can never happen. The full-prefill baseline
 * runs exactly this token sequence too.
 *
 * With chat = 1 the segments sit inside the model's chat template: the system
 * turn, then one user turn holding the docs and the question, then the
 * generation prompt:
 *
 *   +------------------- prefix ------------------+-- doc 0 --+-- doc 1 --+---- question ----+
 *   | <|im_start|>system\n SYS <|im_end|>\n        | passage   | passage   | Q <|im_end|>\n    |
 *   | <|im_start|>user\n                           |           |           | <|im_start|>      |
 *   |                                              |           |           |  assistant\n      |
 *   +----------------------------------------------+-----------+-----------+------------------+
 *
 * (ChatML shown; any family kvs_chat_render knows works: the template is
 * rendered with sentinel contents and cut at them.) Without chat: BOS if the
 * vocabulary asks for one, the system text, the docs, the question.
 *
 * The doc prefix. A doc's KV is computed once, after a fixed shared prefix
 * (so that it has a sane context: an attention sink, the turn markers), and
 * then moved wherever the doc appears. By default the prefix is the template
 * text that precedes the docs with an empty system message
 * ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n" for ChatML) with
 * chat, and BOS (if the vocabulary adds one; else nothing) without.
 * doc_prefix overrides it (tokenized with PARSE_SPECIAL, and BOS if the
 * vocabulary adds one).
 */
#ifndef KVS_REUSE_SEGMENTS_H
#define KVS_REUSE_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "kvstitch.h"

typedef enum kvs_seg_kind {
    KVS_SEG_PREFIX = 0,  /* BOS, template text, system message: exact or live */
    KVS_SEG_DOC = 1,     /* one doc: cached by content, moved, repaired */
    KVS_SEG_QUESTION = 2 /* the question and the template tail: always live */
} kvs_seg_kind;

typedef struct kvs_seg {
    kvs_seg_kind kind;
    int start, end;      /* token indices [start, end) = positions */
    int doc;             /* index into the input's docs for KVS_SEG_DOC, else -1 */
} kvs_seg;

/* The input: the public kvs_segments (kvstitch.h): chat, system, docs,
 * doc_lens, n_docs, question, doc_prefix. */
typedef kvs_segments kvs_seg_input;

typedef struct kvs_seg_layout {
    int32_t *tokens;          /* (n_tokens) the whole prompt */
    int n_tokens;
    kvs_seg *segs;            /* (n_segs) in order, tiling [0, n_tokens) */
    int n_segs;
    int32_t *doc_prefix;      /* (n_doc_prefix) tokens a doc's KV is computed after */
    int n_doc_prefix;
    int *borders;             /* (n_borders) start of every segment but the first, for the chunker */
    int n_borders;
} kvs_seg_layout;

/* Tokenizes and lays out the input. Docs are tokenized as plain text (no
 * special tokens: retrieved text is data); the system and question text
 * with the template pieces around them, special tokens recognised (as
 * `kvstitch generate` does for a prompt). The question segment must not be
 * empty (its last token gives the first logits). On failure *out is
 * zeroed. */
int kvs_seg_layout_build(const kvs_model *model, const kvs_seg_input *in, kvs_seg_layout *out);
void kvs_seg_layout_free(kvs_seg_layout *lay); /* safe on a zeroed layout */

/* Index of the first doc segment, or -1. */
int kvs_seg_layout_first_doc(const kvs_seg_layout *lay);
/* 1 if doc segment s sits right after a layout equal to the documents' own
 * prefix: its plain chunk was computed there (an exact prefix). */
int kvs_seg_doc_at_own_prefix(const kvs_seg_layout *lay, const kvs_seg *s);

#endif
