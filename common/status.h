/* One status type for the whole project, plus a per-thread message that says what went wrong.
 * 0 is success; errors are negative and grouped by kind. */
#ifndef PL_COMMON_STATUS_H
#define PL_COMMON_STATUS_H

#include <stddef.h>

typedef enum {
    PL_OK = 0,
    PL_ERR_INVALID = -1,     /* bad input from outside (file, message, argument) */
    PL_ERR_NOMEM = -2,
    PL_ERR_IO = -3,          /* errno-style failure of a file or socket */
    PL_ERR_NOT_FOUND = -4,
    PL_ERR_UNSUPPORTED = -5, /* valid but not something we implement (dtype, model type) */
    PL_ERR_RANGE = -6,       /* a value outside its allowed range */
    PL_ERR_TIMEOUT = -7,
    PL_ERR_PROTOCOL = -8,    /* a peer broke the wire protocol */
    PL_ERR_TRANSPORT = -9,   /* ZeroMQ or UCX failure */
    PL_ERR_BACKEND = -10,    /* device runtime failure */
    PL_ERR_CANCELED = -11,
    PL_ERR_BUSY = -12,
    PL_ERR_INFEASIBLE = -13, /* no plan satisfies the constraints */
    PL_ERR_NO_DEVICE = -14,
    PL_ERR_PERMISSION = -15, /* the peer is not allowed to do this (role, owner, path) */
} pl_status_t;

/* Short constant name of a status ("invalid input", ...). Never NULL. */
const char *pl_status_str(pl_status_t status);

/* Record a human-readable message for the current thread's last error and return `status`.
 * Use at the place that first sees the error: `return pl_error(PL_ERR_INVALID, "key %s: ...", k);` */
pl_status_t pl_error(pl_status_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the current thread's last error message with more context ("file.yaml: " + msg). */
pl_status_t pl_error_prefix(pl_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The current thread's last error message; "" when none. Borrowed, valid until the next pl_error. */
const char *pl_error_msg(void);

/* Forget the last error message of this thread. */
void pl_error_clear(void);

#endif
