/* Internal error reporting: set a thread-local detail message and return the status. */
#ifndef KVS_BASE_ERROR_H
#define KVS_BASE_ERROR_H

#include "kvstitch.h"

/* Formats a message into the calling thread's last-error slot and returns
 * status, so callers can write `return kvs_error(KVS_ERR_FORMAT, "...", ...);` */
int kvs_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the current last-error message (adds context as an
 * error travels up, e.g. the file name). Returns status. */
int kvs_error_prefix(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* kvs_last_error() changes only on a failing call (kvstitch.h). A public
 * call that succeeds after failures it tolerated inside (a cache file gone
 * or damaged, a tier down: counted, warned, served otherwise) puts the
 * caller's message back: KVS_ERROR_KEPT(body(...)) as the whole of such a
 * function. */
#define KVS_ERROR_MAX 1024
typedef struct kvs_error_keep {
    char msg[KVS_ERROR_MAX];
} kvs_error_keep;
void kvs_error_keep_begin(kvs_error_keep *k);
int kvs_error_keep_end(const kvs_error_keep *k, int status); /* restores if status is KVS_OK; returns it */
#define KVS_ERROR_KEPT(call)                     \
    do {                                         \
        kvs_error_keep kept_;                    \
        kvs_error_keep_begin(&kept_);            \
        return kvs_error_keep_end(&kept_, call); \
    } while (0)

#endif
