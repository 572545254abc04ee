/* Strategy "selective": the last `overlap` tokens of every moved doc (the
 * ones just before each seam), from layer 0. */
#include "rag/repair/strategy.h"

#include "base/error.h"

static int check_selective(const kvs_repair_params *p, int n_layer) {
    (void)n_layer;
    if (p->overlap < 0) return kvs_error(KVS_ERR_INVALID_ARG, "repair: overlap must be >= 0, got %d", p->overlap);
    return KVS_OK;
}

static int select_selective(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep) {
    (void)rep;
    *l0 = 0;
    return kvs_repair_rows_per_doc(job, kvs_repair_range_seam, rs);
}

const kvs_repair_strategy kvs_repair_selective = {KVS_REPAIR_SELECTIVE, "selective", check_selective,
                                                  select_selective};
