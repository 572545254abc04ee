/*
 * Chunking policy: how a token sequence is cut into cacheable chunks.
 *
 *   positions   0        64       128      192  200   (chunk_size 64, pos0 0)
 *   grid        |--------|--------|--------|----
 *   borders                  ^100                     (segment border)
 *   chunks      [0,64)  [64,100)[100,128)[128,192)[192,200)
 *                        border   head            tail (partial)
 *
 * Cuts are made at every absolute position that is a multiple of chunk_size
 * (so the same prefix is always cut the same way, whatever its length) and at
 * every segment border the caller gives: a chunk never spans a border, so a
 * segment (a RAG document, a system prompt) owns its chunks. The last chunk
 * may end before the next grid line: a partial chunk. It is cached too, so a
 * later prompt that extends this one reuses it up to its very last token.
 *
 * Pure functions, thread-safe.
 */
#ifndef KVS_KV_CHUNKING_H
#define KVS_KV_CHUNKING_H

#define KVS_CHUNK_TOKENS_DEFAULT 64

enum {
    KVS_SPAN_PARTIAL = 1 << 0, /* the tail: ends at n before a grid line */
    KVS_SPAN_BORDER = 1 << 1,  /* ends at a caller-given segment border */
};

/* A chunk of a sequence: token indices [start, end), absolute positions
 * [pos0 + start, pos0 + end). */
typedef struct kvs_span {
    int start, end;
    int flags;       /* KVS_SPAN_* */
} kvs_span;

/* Splits tokens [0, n) whose first token sits at absolute position pos0.
 *   chunk_size  grid step in tokens (> 0; KVS_CHUNK_TOKENS_DEFAULT is 64)
 *   borders     segment borders as token indices, ascending; values <= 0 or
 *               >= n are ignored, duplicates are allowed (may be NULL if
 *               n_borders is 0)
 * Writes at most cap spans to out and the full count to *n_out; returns
 * KVS_ERR_BUFFER_TOO_SMALL when cap is too small (kvs_chunking_max_spans
 * gives a sufficient cap), KVS_ERR_INVALID_ARG for bad arguments or
 * descending borders. n = 0 gives no spans. */
int kvs_chunking_split(int n, int pos0, int chunk_size, const int *borders, int n_borders,
                       kvs_span *out, int cap, int *n_out);

/* An upper bound on the spans kvs_chunking_split can produce. */
int kvs_chunking_max_spans(int n, int chunk_size, int n_borders);

#endif
