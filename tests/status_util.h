/* The check the parser suites make of a call: its status and, exactly, the message it set (a
 * refusal names the file, line, column and key). */
#ifndef PL_TESTS_STATUS_UTIL_H
#define PL_TESTS_STATUS_UTIL_H

#include "common/status.h"

#include <criterion/criterion.h>

#define EXPECT_ST(call, want_st, want_msg)                                                         \
    do {                                                                                           \
        pl_status_t st_ = (call);                                                                  \
        cr_assert_eq(st_, (want_st), "status %d, message: %s", st_, pl_error_msg());               \
        cr_assert_str_eq(pl_error_msg(), (want_msg));                                              \
    } while (0)

#endif
