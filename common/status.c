/* Status names and the per-thread last-error message. */
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PL_ERROR_MSG_MAX 1024

static _Thread_local char s_msg[PL_ERROR_MSG_MAX];

const char *pl_status_str(pl_status_t status)
{
    switch (status) {
    case PL_OK: return "ok";
    case PL_ERR_INVALID: return "invalid input";
    case PL_ERR_NOMEM: return "out of memory";
    case PL_ERR_IO: return "i/o error";
    case PL_ERR_NOT_FOUND: return "not found";
    case PL_ERR_UNSUPPORTED: return "unsupported";
    case PL_ERR_RANGE: return "out of range";
    case PL_ERR_TIMEOUT: return "timed out";
    case PL_ERR_PROTOCOL: return "protocol error";
    case PL_ERR_TRANSPORT: return "transport error";
    case PL_ERR_BACKEND: return "backend error";
    case PL_ERR_CANCELED: return "canceled";
    case PL_ERR_BUSY: return "busy";
    case PL_ERR_INFEASIBLE: return "infeasible";
    case PL_ERR_NO_DEVICE: return "no device";
    case PL_ERR_PERMISSION: return "permission denied";
    }
    return "unknown status";
}

pl_status_t pl_error(pl_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_msg, sizeof(s_msg), fmt, ap);
    va_end(ap);
    return status;
}

pl_status_t pl_error_prefix(pl_status_t status, const char *fmt, ...)
{
    char prefix[PL_ERROR_MSG_MAX];
    char old[PL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, s_msg, sizeof(old));
    size_t n = strnlen(prefix, sizeof(s_msg) - 1);
    memcpy(s_msg, prefix, n);
    const char *rest = old[0] ? old : pl_status_str(status);
    size_t m = strnlen(rest, sizeof(s_msg) - 1 - n);
    memcpy(s_msg + n, rest, m);
    s_msg[n + m] = '\0';
    return status;
}

const char *pl_error_msg(void)
{
    return s_msg;
}

void pl_error_clear(void)
{
    s_msg[0] = '\0';
}
