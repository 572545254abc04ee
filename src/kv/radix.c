#include "kv/radix.h"

#include "base/error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct hanger {
    void *item;
    int start;
} hanger;

typedef struct rnode {
    struct rnode *parent;
    int depth;              /* tokens from the root to the end of edge[] */
    int edge_len;           /* tokens on the edge from the parent (0 for the root only) */
    int edge_cap;           /* allocated edge length (a split shortens edges in place) */
    int32_t *edge;          /* (edge_cap), first edge_len used; apart from the node so
                               that a merge can give a node a longer edge in place */
    int n_child, cap_child;
    struct rnode **child;   /* (n_child) sorted by edge[0] */
    int n_hang, cap_hang;
    hanger *hang;           /* (n_hang) items ending at this depth */
    int sub_min;            /* min item start in this subtree, INT_MAX if none */
    void *sub_item;         /* an item with that start */
    int sub_end;            /* its depth */
} rnode;

struct kvs_radix {
    rnode *root;
    size_t n_nodes, n_items, n_edge_tokens, bytes;
    size_t merges_skipped;  /* merges given up for lack of memory */
};

static int (*g_fail_hook)(void);

void kvs_radix_set_alloc_fail_hook(int (*hook)(void)) { g_fail_hook = hook; }

/* Every allocation goes through here: the test hook, and byte accounting. */
static void *r_alloc(kvs_radix *r, size_t n) {
    if (g_fail_hook && g_fail_hook()) return NULL;
    void *p = malloc(n);
    if (p) r->bytes += n;
    return p;
}

static void r_free(kvs_radix *r, void *p, size_t n) {
    if (!p) return;
    r->bytes -= n;
    free(p);
}

static rnode *node_new(kvs_radix *r, int edge_len) {
    rnode *x = r_alloc(r, sizeof *x);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    if (edge_len) {
        x->edge = r_alloc(r, (size_t)edge_len * sizeof(int32_t));
        if (!x->edge) {
            r_free(r, x, sizeof *x);
            return NULL;
        }
    }
    x->edge_len = x->edge_cap = edge_len;
    x->sub_min = INT_MAX;
    return x;
}

static void node_free(kvs_radix *r, rnode *x) {
    r_free(r, x->child, (size_t)x->cap_child * sizeof *x->child);
    r_free(r, x->hang, (size_t)x->cap_hang * sizeof *x->hang);
    r_free(r, x->edge, (size_t)x->edge_cap * sizeof(int32_t));
    r_free(r, x, sizeof *x);
}

/* Grows an array to hold need elements; on failure the old one is intact. */
static int grow(kvs_radix *r, void **arr, int *cap, size_t elsz, int need) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 1;
    while (nc < need) nc *= 2;
    void *p = r_alloc(r, (size_t)nc * elsz);
    if (!p) return -1;
    if (*cap) memcpy(p, *arr, (size_t)*cap * elsz);
    r_free(r, *arr, (size_t)*cap * elsz);
    *arr = p;
    *cap = nc;
    return 0;
}

static int grow_child(kvs_radix *r, rnode *x, int need) {
    void *p = x->child;
    int rc = grow(r, &p, &x->cap_child, sizeof *x->child, need);
    x->child = p;
    return rc;
}

static int grow_hang(kvs_radix *r, rnode *x, int need) {
    void *p = x->hang;
    int rc = grow(r, &p, &x->cap_hang, sizeof *x->hang, need);
    x->hang = p;
    return rc;
}

/* Index of the child whose edge starts with tok, or where it would go. */
static int child_pos(const rnode *x, int32_t tok, int *found) {
    int lo = 0, hi = x->n_child;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int32_t t = x->child[mid]->edge[0];
        if (t == tok) { *found = 1; return mid; }
        if (t < tok) lo = mid + 1;
        else hi = mid;
    }
    *found = 0;
    return lo;
}

static void recompute(rnode *x) {
    x->sub_min = INT_MAX;
    x->sub_item = NULL;
    x->sub_end = 0;
    for (int i = 0; i < x->n_hang; i++)
        if (x->hang[i].start < x->sub_min) {
            x->sub_min = x->hang[i].start;
            x->sub_item = x->hang[i].item;
            x->sub_end = x->depth;
        }
    for (int i = 0; i < x->n_child; i++) {
        const rnode *c = x->child[i];
        if (c->sub_min < x->sub_min) {
            x->sub_min = c->sub_min;
            x->sub_item = c->sub_item;
            x->sub_end = c->sub_end;
        }
    }
}

int kvs_radix_new(kvs_radix **out) {
    kvs_radix *r = calloc(1, sizeof *r);
    if (!r) return kvs_error(KVS_ERR_NOMEM, "radix: out of memory");
    r->bytes = sizeof *r;
    r->root = node_new(r, 0);
    if (!r->root) {
        free(r);
        return kvs_error(KVS_ERR_NOMEM, "radix: out of memory");
    }
    r->n_nodes = 1;
    *out = r;
    return KVS_OK;
}

void kvs_radix_free(kvs_radix *r) {
    if (!r) return;
    /* Iterative post-order via parent links: the tree can be deep. */
    rnode *x = r->root;
    while (x) {
        if (x->n_child) {
            x = x->child[--x->n_child];
            continue;
        }
        rnode *p = x->parent;
        node_free(r, x);
        x = p;
    }
    free(r);
}

/* Splits c's edge after j tokens (0 < j < edge_len) using the preallocated
 * node s (edge_cap >= j, cap_child >= 1). s takes c's place under c's parent. */
static void split(rnode *c, rnode *s, int j) {
    rnode *p = c->parent;
    int found;
    int at = child_pos(p, c->edge[0], &found);
    memcpy(s->edge, c->edge, (size_t)j * sizeof(int32_t));
    s->edge_len = j;
    s->depth = c->depth - c->edge_len + j;
    s->parent = p;
    memmove(c->edge, c->edge + j, (size_t)(c->edge_len - j) * sizeof(int32_t));
    c->edge_len -= j;
    c->parent = s;
    s->child[0] = c;
    s->n_child = 1;
    s->sub_min = c->sub_min;
    s->sub_item = c->sub_item;
    s->sub_end = c->sub_end;
    p->child[at] = s;
}

static void add_child(rnode *x, rnode *c) {
    int found;
    int at = child_pos(x, c->edge[0], &found);
    memmove(x->child + at + 1, x->child + at, (size_t)(x->n_child - at) * sizeof *x->child);
    x->child[at] = c;
    x->n_child++;
    c->parent = x;
}

int kvs_radix_insert(kvs_radix *r, const int32_t *path, int n, int start, void *item, kvs_radix_node **node) {
    if (n <= 0 || start < 0 || start >= n || !path)
        return kvs_error(KVS_ERR_INVALID_ARG, "radix insert: span [%d, %d) is empty or negative", start, n);
    /* Walk without changing anything, to know which allocations are needed. */
    rnode *x = r->root, *c = NULL;
    int d = 0, j = 0;
    while (d < n) {
        int found;
        int at = child_pos(x, path[d], &found);
        if (!found) break;
        c = x->child[at];
        j = 1;
        while (j < c->edge_len && d + j < n && c->edge[j] == path[d + j]) j++;
        if (j < c->edge_len) break; /* ends or diverges inside c's edge */
        x = c;
        c = NULL;
        d += j;
    }
    rnode *s = NULL, *leaf = NULL, *target;
    if (d == n) {
        /* Exact node. */
        for (int i = 0; i < x->n_hang; i++)
            if (x->hang[i].item == item) {
                if (node) *node = (kvs_radix_node *)x;
                return KVS_RADIX_EXISTS;
            }
        if (grow_hang(r, x, x->n_hang + 1)) goto oom;
        target = x;
    } else if (!c) {
        /* New leaf under x. */
        leaf = node_new(r, n - d);
        if (!leaf || grow_hang(r, leaf, 1) || grow_child(r, x, x->n_child + 1)) goto oom;
        memcpy(leaf->edge, path + d, (size_t)(n - d) * sizeof(int32_t));
        leaf->depth = n;
        add_child(x, leaf);
        r->n_nodes++;
        r->n_edge_tokens += (size_t)(n - d);
        target = leaf;
    } else {
        /* Split c after j tokens; hang on the split node or on a new leaf. */
        int need_leaf = d + j < n;
        s = node_new(r, j);
        if (!s || grow_child(r, s, need_leaf ? 2 : 1)) goto oom;
        if (need_leaf) {
            leaf = node_new(r, n - d - j);
            if (!leaf || grow_hang(r, leaf, 1)) goto oom;
        } else if (grow_hang(r, s, 1)) {
            goto oom;
        }
        split(c, s, j);
        r->n_nodes++;
        if (need_leaf) {
            memcpy(leaf->edge, path + d + j, (size_t)(n - d - j) * sizeof(int32_t));
            leaf->depth = n;
            add_child(s, leaf);
            r->n_nodes++;
            r->n_edge_tokens += (size_t)(n - d - j);
            target = leaf;
        } else {
            target = s;
        }
    }
    target->hang[target->n_hang++] = (hanger){item, start};
    r->n_items++;
    for (rnode *a = target; a; a = a->parent)
        if (start < a->sub_min) {
            a->sub_min = start;
            a->sub_item = item;
            a->sub_end = n;
        }
    if (node) *node = (kvs_radix_node *)target;
    return KVS_OK;
oom:
    if (s) node_free(r, s);
    if (leaf) node_free(r, leaf);
    return kvs_error(KVS_ERR_NOMEM, "radix insert: out of memory for a path of %d tokens", n);
}

static void remove_child(rnode *x, rnode *c) {
    int found;
    int at = child_pos(x, c->edge[0], &found);
    memmove(x->child + at, x->child + at + 1, (size_t)(x->n_child - at - 1) * sizeof *x->child);
    x->n_child--;
}

/* x has no items and one child c: fold x's edge into c's, so c (which may
 * carry items and whose address the store keeps) survives and x goes.
 * Returns c, or x when memory is short (the merge is skipped). */
static rnode *merge(kvs_radix *r, rnode *x) {
    rnode *c = x->child[0];
    int len = x->edge_len + c->edge_len;
    int32_t *edge = r_alloc(r, (size_t)len * sizeof(int32_t));
    if (!edge) {
        r->merges_skipped++;
        return x;
    }
    memcpy(edge, x->edge, (size_t)x->edge_len * sizeof(int32_t));
    memcpy(edge + x->edge_len, c->edge, (size_t)c->edge_len * sizeof(int32_t));
    r_free(r, c->edge, (size_t)c->edge_cap * sizeof(int32_t));
    c->edge = edge;
    c->edge_len = c->edge_cap = len;
    rnode *p = x->parent;
    int found;
    p->child[child_pos(p, x->edge[0], &found)] = c;
    c->parent = p;
    x->n_child = 0;
    node_free(r, x);
    r->n_nodes--;
    return c;
}

/* Unhangs item from node x, then prunes and merges around it. */
static void unhang(kvs_radix *r, rnode *x, int i) {
    void *item = x->hang[i].item;
    x->hang[i] = x->hang[--x->n_hang];
    r->n_items--;
    /* Prune empty leaves upwards, then merge a pass-through node. */
    while (x != r->root && x->n_hang == 0 && x->n_child == 0) {
        rnode *p = x->parent;
        remove_child(p, x);
        r->n_edge_tokens -= (size_t)x->edge_len;
        node_free(r, x);
        r->n_nodes--;
        x = p;
    }
    if (x != r->root && x->n_hang == 0 && x->n_child == 1) x = merge(r, x);
    /* Only summaries that named the removed item can be stale: pruned nodes
     * held no other item and a merge keeps the set of items, so any other
     * summary's item is still below it and still minimal. Ties may make a
     * node above a fresh one name the item, so the whole path is checked. */
    for (rnode *a = x; a; a = a->parent)
        if (a->sub_item == item) recompute(a);
}

int kvs_radix_remove(kvs_radix *r, const int32_t *path, int n, void *item) {
    if (n <= 0 || !path) return kvs_error(KVS_ERR_INVALID_ARG, "radix remove: empty path");
    rnode *x = r->root;
    int d = 0;
    while (d < n) {
        int found;
        int at = child_pos(x, path[d], &found);
        if (!found) break;
        rnode *c = x->child[at];
        if (c->edge_len > n - d || memcmp(c->edge, path + d, (size_t)c->edge_len * sizeof(int32_t))) break;
        x = c;
        d += c->edge_len;
    }
    int i = 0;
    if (d == n)
        while (i < x->n_hang && x->hang[i].item != item) i++;
    if (d != n || i == x->n_hang)
        return kvs_error(KVS_ERR_NOT_FOUND, "radix remove: item not at depth %d of its path", n);
    unhang(r, x, i);
    return KVS_OK;
}

int kvs_radix_remove_at(kvs_radix *r, kvs_radix_node *node, void *item) {
    rnode *x = (rnode *)node;
    int i = 0;
    while (x && i < x->n_hang && x->hang[i].item != item) i++;
    if (!x || i == x->n_hang) return kvs_error(KVS_ERR_NOT_FOUND, "radix remove: item not on the given node");
    unhang(r, x, i);
    return KVS_OK;
}

/* --- lookup ---------------------------------------------------------------- */

typedef struct seg_out {
    kvs_radix_seg *segs;
    int cap, n;
    void *last_item;
    int last_to;
} seg_out;

/* Appends [from, to) served by item, extending the previous segment when it
 * is the same item and contiguous. Counts beyond cap without writing. */
static void emit(seg_out *o, void *item, int istart, int iend, int from, int to) {
    if (o->n && o->last_item == item && o->last_to == from) {
        if (o->n <= o->cap) o->segs[o->n - 1].to = to;
    } else {
        if (o->n < o->cap) o->segs[o->n] = (kvs_radix_seg){item, istart, iend, from, to};
        o->n++;
    }
    o->last_item = item;
    o->last_to = to;
}

/* Covers [e, p->depth) with p's subtree minimum, which starts at or before e
 * (p was recorded as prev only when that held) and hangs in p's subtree, so
 * it agrees with the prompt at least down to p. */
static void fill_from(const rnode *p, int *e, seg_out *o) {
    if (p->depth > *e) {
        emit(o, p->sub_item, p->sub_min, p->sub_end, *e, p->depth);
        *e = p->depth;
    }
}

/* Visits a node on the prompt's path; *e = covered so far, *prev = the last
 * visited node whose subtree still covers token *e. Returns 0 when nothing
 * at or below x covers token *e any more (coverage is final). */
static int visit(const rnode *x, int *e, const rnode **prev, seg_out *o) {
    for (int pass = 0; pass < 2; pass++) {
        const hanger *best = NULL;
        for (int i = 0; i < x->n_hang; i++)
            if (!best || x->hang[i].start < best->start) best = &x->hang[i];
        if (best && best->start <= *e) {
            /* an item ending right here covers [e, depth) */
            emit(o, best->item, best->start, x->depth, *e, x->depth);
            *e = x->depth;
            *prev = x;
            return 1;
        }
        if (x->sub_min <= *e) {
            /* something deeper still covers e: decide later, fewer segments */
            *prev = x;
            return 1;
        }
        if (pass == 0) fill_from(*prev, e, o);
    }
    return 0;
}

int kvs_radix_lookup(const kvs_radix *r, const int32_t *tokens, int n, kvs_radix_seg *segs, int cap,
                     kvs_radix_match *m) {
    if (n < 0 || (n && !tokens) || cap < 0 || (cap && !segs))
        return kvs_error(KVS_ERR_INVALID_ARG, "radix lookup: n %d, cap %d", n, cap);
    seg_out o = {segs, cap, 0, NULL, -1};
    const rnode *x = r->root, *prev = r->root, *end = r->root;
    int d = 0, e = 0, m_len = 0;
    int live = r->root->sub_min <= 0; /* coverage can still grow */
    for (;;) {
        if (d == n) { end = x; m_len = d; break; }
        int found;
        int at = child_pos(x, tokens[d], &found);
        if (!found) { end = x; m_len = d; break; }
        const rnode *c = x->child[at];
        int j = 1;
        while (j < c->edge_len && d + j < n && c->edge[j] == tokens[d + j]) j++;
        if (j < c->edge_len) { end = c; m_len = d + j; break; }
        d += j;
        x = c;
        if (live) live = visit(x, &e, &prev, &o);
    }
    /* The match ends at m_len, at node `end` or inside the edge leading to
     * it: every item below `end` agrees with the prompt on [0, m_len). */
    if (live && e < m_len) {
        if (end->sub_min > e) fill_from(prev, &e, &o);
        if (end->sub_min <= e && e < m_len) {
            emit(&o, end->sub_item, end->sub_min, end->sub_end, e, m_len);
            e = m_len;
        }
    }
    m->n_matched = m_len;
    m->n_covered = e;
    m->n_segs = o.n;
    if (o.n > cap)
        return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "radix lookup: %d segments, room for %d", o.n, cap);
    return KVS_OK;
}

void kvs_radix_get_stats(const kvs_radix *r, kvs_radix_stats *st) {
    st->n_nodes = r->n_nodes;
    st->n_items = r->n_items;
    st->n_edge_tokens = r->n_edge_tokens;
    st->bytes = r->bytes;
}

/* --- validation (tests) ------------------------------------------------------ */

static int subtree_has(const rnode *x, void *item, int start, int depth) {
    for (int i = 0; i < x->n_hang; i++)
        if (x->hang[i].item == item && x->hang[i].start == start && x->depth == depth) return 1;
    for (int i = 0; i < x->n_child; i++)
        if (subtree_has(x->child[i], item, start, depth)) return 1;
    return 0;
}

typedef struct vcount {
    size_t nodes, items, edge_tokens;
} vcount;

static int validate_node(const kvs_radix *r, const rnode *x, vcount *vc) {
    vc->nodes++;
    vc->items += (size_t)x->n_hang;
    vc->edge_tokens += (size_t)x->edge_len;
    if (x != r->root) {
        if (x->edge_len < 1 || x->depth != x->parent->depth + x->edge_len)
            return kvs_error(KVS_ERR_INTERNAL, "radix: node at depth %d: bad edge length %d", x->depth, x->edge_len);
        if (x->n_hang == 0 && x->n_child == 0)
            return kvs_error(KVS_ERR_INTERNAL, "radix: empty leaf at depth %d", x->depth);
        if (x->n_hang == 0 && x->n_child == 1 && r->merges_skipped == 0)
            return kvs_error(KVS_ERR_INTERNAL, "radix: unmerged pass-through node at depth %d", x->depth);
    }
    int mn = INT_MAX;
    for (int i = 0; i < x->n_hang; i++) {
        if (x->hang[i].start < 0 || x->hang[i].start >= x->depth)
            return kvs_error(KVS_ERR_INTERNAL, "radix: item start %d at depth %d", x->hang[i].start, x->depth);
        if (x->hang[i].start < mn) mn = x->hang[i].start;
    }
    for (int i = 0; i < x->n_child; i++) {
        const rnode *c = x->child[i];
        if (c->parent != x) return kvs_error(KVS_ERR_INTERNAL, "radix: bad parent link at depth %d", c->depth);
        if (i && x->child[i - 1]->edge[0] >= c->edge[0])
            return kvs_error(KVS_ERR_INTERNAL, "radix: children unsorted at depth %d", x->depth);
        int rc = validate_node(r, c, vc);
        if (rc) return rc;
        if (c->sub_min < mn) mn = c->sub_min;
    }
    if (mn != x->sub_min)
        return kvs_error(KVS_ERR_INTERNAL, "radix: sub_min %d != %d at depth %d", x->sub_min, mn, x->depth);
    if (mn != INT_MAX && !subtree_has(x, x->sub_item, x->sub_min, x->sub_end))
        return kvs_error(KVS_ERR_INTERNAL, "radix: sub_item at depth %d is not in its subtree", x->depth);
    return KVS_OK;
}

int kvs_radix_validate(const kvs_radix *r) {
    if (r->root->edge_len || r->root->depth || r->root->n_hang)
        return kvs_error(KVS_ERR_INTERNAL, "radix: bad root");
    vcount vc = {0, 0, 0};
    int rc = validate_node(r, r->root, &vc);
    if (rc) return rc;
    if (vc.nodes != r->n_nodes || vc.items != r->n_items || vc.edge_tokens != r->n_edge_tokens)
        return kvs_error(KVS_ERR_INTERNAL, "radix: counts %zu/%zu/%zu, tree has %zu/%zu/%zu", r->n_nodes,
                         r->n_items, r->n_edge_tokens, vc.nodes, vc.items, vc.edge_tokens);
    return KVS_OK;
}
