/*
 * Prefix index: a token-level radix tree (compressed edges) over cached token
 * sequences. Items (chunks, as opaque pointers) hang on nodes: an item that
 * holds the KV of tokens [a, b) of a path hangs at depth b of that path.
 *
 * Two prompts cached with 4-token chunks, "A B C D E F G H I" and
 * "A B C D E F X Y":
 *
 *              (root) depth 0     sub_min = 0
 *                 |
 *              [A B C D]
 *                 |
 *                (n1) depth 4     hangs {[0,4)}
 *                 |
 *               [E F]
 *                 |
 *                (n2) depth 6     no items (a branch point)  sub_min = 4
 *                /      \
 *          [G H]          [X Y]
 *            |              |
 *          (n3) depth 8   (n4) depth 8   hangs {[4,8) of ..XY}
 *   hangs {[4,8) of ..GH}
 *            |
 *           [I]
 *            |
 *          (n5) depth 9   hangs {[8,9)}   (a partial tail chunk)
 *
 * Every node stores the edge that leads to it (the tokens between its parent
 * and itself), its depth, its children sorted by first edge token, the items
 * hanging on it, and sub_min: the smallest item start in its subtree, with
 * that item. sub_min is what makes partial use exact and cheap: causal
 * attention means the KV of token t depends only on tokens 0..t, so an item
 * covering [a, b) whose path agrees with the prompt up to depth m < b still
 * holds the exact KV of tokens [a, m). A prompt "A B C D E F G" is served
 * [0,4) by n1's item and [4,7) by the first 3 tokens of n3's item, found
 * through sub_min of n3 (the node just past the match).
 *
 * Lookup walks the prompt down the tree once (binary search among children,
 * then a token compare along each edge): O(prompt length + nodes on the path
 * * log fan-out). It returns the longest prefix [0, n_covered) whose every
 * token is covered by some item on the matched path, as a list of segments
 * (item, [from, to)) that tile it; n_covered <= n_matched, the longest common
 * prefix with any cached path.
 *
 * Removing an item prunes nodes left with no items and no children and merges
 * a node with no items and one child into that child (compressed edges stay
 * maximal). If the merge cannot allocate, it is skipped: the tree stays
 * correct, only less compact.
 *
 * Thread-safety: none inside. Lookups only read (any number may run at once);
 * insert/remove need exclusive access (the store holds a rwlock).
 */
#ifndef KVS_KV_RADIX_H
#define KVS_KV_RADIX_H

#include "kvstitch.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kvs_radix kvs_radix;
/* A node, as a handle for kvs_radix_remove_at. A node never moves or dies
 * while an item hangs on it (splits insert a new node above it, merges keep
 * the lower node, pruning only frees nodes without items). */
typedef struct kvs_radix_node kvs_radix_node;

/* Part of a lookup answer: prompt tokens [from, to) are served by item, which
 * covers [item_start, item_end) of the same path (item_start <= from,
 * to <= item_end). The item's own token offset of `from` is from - item_start. */
typedef struct kvs_radix_seg {
    void *item;
    int item_start, item_end;
    int from, to;
} kvs_radix_seg;

typedef struct kvs_radix_match {
    int n_matched;  /* longest common prefix of the prompt with any cached path */
    int n_covered;  /* segments tile [0, n_covered) */
    int n_segs;     /* segments in the answer (when the call succeeds) */
} kvs_radix_match;

typedef struct kvs_radix_stats {
    size_t n_nodes;       /* including the root */
    size_t n_items;
    size_t n_edge_tokens; /* tokens stored on edges */
    size_t bytes;         /* heap bytes held by the tree */
} kvs_radix_stats;

/* Positive soft outcome of kvs_radix_insert. */
#define KVS_RADIX_EXISTS 1

int kvs_radix_new(kvs_radix **out);
/* Frees the tree; the items themselves are the caller's. NULL is a no-op. */
void kvs_radix_free(kvs_radix *r);

/* Hangs item at depth n of path[0..n), covering [start, n); 0 <= start < n.
 * *node (if node is not NULL) receives the node it hangs on. Returns
 * KVS_RADIX_EXISTS (tree unchanged) if this item already hangs there.
 * On KVS_ERR_NOMEM the tree is unchanged. */
int kvs_radix_insert(kvs_radix *r, const int32_t *path, int n, int start, void *item,
                     kvs_radix_node **node);

/* Unhangs item from depth n of path[0..n). KVS_ERR_NOT_FOUND if it is not
 * there. Never fails for lack of memory. */
int kvs_radix_remove(kvs_radix *r, const int32_t *path, int n, void *item);
/* The same, given the node kvs_radix_insert returned (no path needed). */
int kvs_radix_remove_at(kvs_radix *r, kvs_radix_node *node, void *item);

/* Longest covered prefix of tokens[0..n). Writes up to cap segments to segs
 * (ordered, tiling [0, m->n_covered)). If more than cap are needed it returns
 * KVS_ERR_BUFFER_TOO_SMALL with m->n_segs = the number needed (call again
 * with that cap). Read-only on the tree. */
int kvs_radix_lookup(const kvs_radix *r, const int32_t *tokens, int n, kvs_radix_seg *segs, int cap,
                     kvs_radix_match *m);

void kvs_radix_get_stats(const kvs_radix *r, kvs_radix_stats *st);

/* Checks every structural invariant (depths, sorted children, parent links,
 * sub_min, compression unless merges were skipped). KVS_OK or
 * KVS_ERR_INTERNAL naming the first violation. For tests. */
int kvs_radix_validate(const kvs_radix *r);

/* Tests only (not thread-safe, process-wide): when hook is set, every
 * allocation of the radix code first calls it and fails if it returns
 * nonzero. NULL restores normal allocation. */
void kvs_radix_set_alloc_fail_hook(int (*hook)(void));

#endif
