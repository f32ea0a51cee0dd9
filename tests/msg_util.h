/* What the control-message suites share: a message through encode, the compact wire text and
 * decode as its type; and a body that must be refused naming a field, the output untouched. */
#ifndef PL_TESTS_MSG_UTIL_H
#define PL_TESTS_MSG_UTIL_H

#include "transport/msg.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* Encode m, print it compactly as it goes on the wire, decode that text as m's type. */
static inline void tm_round_trip(const pl_msg_t *m, pl_msg_t *out)
{
    json_t *body;
    cr_assert_eq(pl_msg_encode(m, &body), PL_OK, "%s", pl_error_msg());
    char *text = json_dumps(body, JSON_COMPACT);
    const char *name = pl_msg_name(m->type);
    cr_assert_eq(pl_msg_decode_wire(name, strlen(name), text, strlen(text), out), PL_OK, "%s: %s",
                 text, pl_error_msg());
    cr_assert_eq(out->type, m->type);
    free(text);
    json_decref(body);
}

/* Decode `json` as `type`: must fail naming `needle`, leaving the output as it was. */
static inline void tm_refused(pl_msg_type_t type, const char *json, const char *needle)
{
    pl_msg_t out;
    memset(&out, 0x5a, sizeof(out));
    cr_assert_eq(
        pl_msg_decode_wire(pl_msg_name(type), strlen(pl_msg_name(type)), json, strlen(json), &out),
        PL_ERR_PROTOCOL, "%s accepted: %s", pl_msg_name(type), json);
    cr_assert(strstr(pl_error_msg(), needle), "'%s' not in '%s'", needle, pl_error_msg());
    unsigned char *p = (unsigned char *)&out;
    for (size_t i = 0; i < sizeof(out); i++)
        cr_assert_eq(p[i], 0x5a, "output written on error (byte %zu)", i);
}

#endif
