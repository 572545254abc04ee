/* Strategy "full": every moved token from layer 0: the prompt's exact KV,
 * a cold prefill's bits (the kernels are batch-invariant). */
#include "rag/repair/strategy.h"

static int select_full(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep) {
    (void)rep;
    *l0 = 0;
    return kvs_repair_rows_all(job, rs);
}

const kvs_repair_strategy kvs_repair_full = {KVS_REPAIR_FULL, "full", NULL, select_full};
