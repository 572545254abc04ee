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

#endif
