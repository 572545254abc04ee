#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[KVS_ERROR_MAX];

const char *kvs_strerror(int status) {
    switch (status) {
    case KVS_OK: return "ok";
    case KVS_ERR_INVALID_ARG: return "invalid argument";
    case KVS_ERR_IO: return "I/O error";
    case KVS_ERR_FORMAT: return "malformed file";
    case KVS_ERR_UNSUPPORTED: return "unsupported";
    case KVS_ERR_NOMEM: return "out of memory";
    case KVS_ERR_NOT_FOUND: return "not found";
    case KVS_ERR_CONTEXT_FULL: return "context window exceeded";
    case KVS_ERR_UTF8: return "invalid UTF-8";
    case KVS_ERR_MODEL_MISMATCH: return "cache belongs to another model";
    case KVS_ERR_CORRUPT: return "corrupt cache entry";
    case KVS_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case KVS_ERR_INTERNAL: return "internal error";
    case KVS_ERR_INTERRUPTED: return "interrupted";
    default: return "unknown status";
    }
}

const char *kvs_last_error(void) {
    return last_error[0] ? last_error : "no error detail";
}

int kvs_error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

int kvs_error_prefix(int status, const char *fmt, ...) {
    char old[KVS_ERROR_MAX];
    memcpy(old, last_error, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* a message that begins with the prefix already (a file's path) keeps
     * it once: "a.gguf: a.gguf: key ..." had named the file twice */
    size_t pn = n < 0 ? 0 : strnlen(last_error, sizeof last_error);
    if (pn && !strncmp(old, last_error, pn) && !strncmp(old + pn, ": ", 2)) {
        memcpy(last_error, old, sizeof old);
        return status;
    }
    /* Append ": <old message>" after the prefix, truncating what does not fit. */
    size_t used = n < 0 ? 0 : (size_t)n < sizeof last_error ? (size_t)n : sizeof last_error - 1;
    size_t room = sizeof last_error - used;
    if (room > 2) {
        last_error[used] = ':';
        last_error[used + 1] = ' ';
        size_t len = strnlen(old, room - 3);
        memcpy(last_error + used + 2, old, len);
        last_error[used + 2 + len] = 0;
    }
    return status;
}

void kvs_error_keep_begin(kvs_error_keep *k) { memcpy(k->msg, last_error, sizeof k->msg); }

int kvs_error_keep_end(const kvs_error_keep *k, int status) {
    if (status == KVS_OK) memcpy(last_error, k->msg, sizeof last_error);
    return status;
}
