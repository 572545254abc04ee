/* kvs_isa_paths, kvs_isa_in_use: which kernel paths this CPU can run, which
 * one runs (for `kvstitch --version` and `kvstitch bench`). */
#include "kernels/kernels_impl.h"
#include "kvstitch.h"

const char *kvs_isa_paths(void) {
    /* Best first; every level includes the ones below it. */
    static const char *const by_level[3] = {"scalar", "avx2 scalar", "avx512vnni avx2 scalar"};
    int level = kvs_kernels_cpu_level();
    if (level < 0 || level > 2) level = 0;
    if (level == 2 && kvs_kernels_amx_available()) return "amx avx512vnni avx2 scalar";
    return by_level[level];
}

const char *kvs_isa_in_use(void) {
    if (kvs_kernels_check_env()) return ""; /* KVS_ISA names no path here */
    return kvs_kernels_amx() ? "amx" : kvs_kernels_isa();
}
