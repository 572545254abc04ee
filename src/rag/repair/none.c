/* Strategy "none": moved documents as they are (concatenation). */
#include "rag/repair/strategy.h"

static int select_none(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep) {
    (void)rep;
    *l0 = job->f->hp->n_layer;
    return kvs_rowset_alloc(rs, 0, job->f->hp->n_embd);
}

const kvs_repair_strategy kvs_repair_none = {KVS_REPAIR_NONE, "none", NULL, select_none};
