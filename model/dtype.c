/* Element types of stored tensors: sizes, names, and conversion of a run of elements to f32.
 * Conversions use the project's own f16/bf16 helpers so every backend rounds the same way. */
#include "model/model.h"
#include "model/safetensors.h"
#include "model/wtype.h"

#include "common/util.h"

#include <string.h>

/* model.h's comment: a tensor's stored weight type has its dtype's value for the float types. */
_Static_assert((int)PL_DT_F32 == (int)PL_WT_F32 && (int)PL_DT_F16 == (int)PL_WT_F16 &&
                   (int)PL_DT_BF16 == (int)PL_WT_BF16,
               "pl_dtype_t and pl_wtype_t share their float values");

size_t pl_dtype_size(pl_dtype_t dt)
{
    switch (dt) {
    case PL_DT_F32:
        return 4;
    case PL_DT_F16:
    case PL_DT_BF16:
        return 2;
    }
    return 0;
}

const char *pl_dtype_name(pl_dtype_t dt)
{
    switch (dt) {
    case PL_DT_F32:
        return "F32";
    case PL_DT_F16:
        return "F16";
    case PL_DT_BF16:
        return "BF16";
    }
    return "?";
}

pl_status_t pl_dtype_parse(const char *name, pl_dtype_t *dt_p)
{
    static const struct {
        const char *name;
        pl_dtype_t dt;
    } s_names[] = {{"F32", PL_DT_F32}, {"F16", PL_DT_F16}, {"BF16", PL_DT_BF16}};
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_names); i++) {
        if (strcmp(name, s_names[i].name) == 0) {
            *dt_p = s_names[i].dt;
            return PL_OK;
        }
    }
    return pl_error(PL_ERR_UNSUPPORTED, "dtype '%s' is not supported (F32, F16, BF16 are)", name);
}

void pl_dtype_to_f32(pl_dtype_t dt, const void *src, size_t n, float *dst)
{
    pl_wtype_to_f32((pl_wtype_t)dt, src, n, dst); /* one conversion, in wtype.c */
}
