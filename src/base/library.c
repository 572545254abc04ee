/* What the library says about itself (version) and the one deallocator for
 * memory it hands to callers: a caller linking another C runtime, or a
 * binding (python/), must not pass our allocations to its own free(). */
#include <stdlib.h>

#include "kvstitch.h"

#define KVS_STR_(x) #x
#define KVS_STR(x) KVS_STR_(x)

const char *kvs_version(void) {
    return KVS_STR(KVS_VERSION_MAJOR) "." KVS_STR(KVS_VERSION_MINOR) "." KVS_STR(KVS_VERSION_PATCH);
}

void kvs_free(void *p) { free(p); }
