/* Strategy "firstk": the first `first_k` tokens of every moved doc (EPIC's
 * attention-sink repair), from layer 0. */
#include "rag/repair/strategy.h"

#include "base/error.h"

static int check_firstk(const kvs_repair_params *p, int n_layer) {
    (void)n_layer;
    if (p->first_k < 0) return kvs_error(KVS_ERR_INVALID_ARG, "repair: first-k must be >= 0, got %d", p->first_k);
    return KVS_OK;
}

static void range_first(const kvs_repair_params *p, int doc_len, int *lo, int *hi) {
    *lo = 0;
    *hi = p->first_k < doc_len ? p->first_k : doc_len;
}

static int select_firstk(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep) {
    (void)rep;
    *l0 = 0;
    return kvs_repair_rows_per_doc(job, range_first, rs);
}

const kvs_repair_strategy kvs_repair_firstk = {KVS_REPAIR_FIRSTK, "firstk", check_firstk, select_firstk};
