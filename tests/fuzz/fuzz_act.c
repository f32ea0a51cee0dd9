/* libFuzzer harness for the activation decoder: no input may crash it, and whatever it accepts
 * must re-encode to exactly the same bytes. Not part of the CMake build:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. \
 *       tests/fuzz/fuzz_act.c transport/act.c transport/act_dtype.c common/status.c \
 *       -o /tmp/fuzz_act
 *   /tmp/fuzz_act -max_total_time=60 -max_len=4096 /tmp/fuzz_act_corpus */
#include "transport/act.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQ 4096u

static uint32_t s_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pl_act_seq_t seqs[MAX_SEQ];
    pl_act_limits_t lim = {.max_seq = 8, .max_tokens = 64, .dim = 4, .max_pos = 1000};
    pl_act_hdr_t hdr;
    const void *payload = NULL;
    void *copy, *again = NULL;
    size_t again_len = 0;

    /* The first 16 bytes, when present, choose the limits (max_seq bounded by our buffer). */
    if (size >= 16 && data[0] == 'L') {
        lim.max_seq = s_u32(data) % (MAX_SEQ + 1);
        lim.max_tokens = s_u32(data + 4);
        lim.dim = s_u32(data + 8) % 64;
        lim.max_pos = s_u32(data + 12) >> 2;
        lim.dtype = data[12] & 3u; /* 3 is no dtype: every hidden message must be refused */
        data += 16;
        size -= 16;
    }
    /* An exact-size heap copy, so any read past the end is caught. */
    copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    if (pl_act_decode(copy, size, &lim, &hdr, seqs, &payload) == PL_OK) {
        size_t n = (size_t)hdr.n_tokens * hdr.dim;
        const float *f32 = NULL;
        const void *src = NULL;
        float *scratch = NULL;
        double sums[PL_ACT_SUM_MAX];
        bool rows = hdr.kind == PL_ACT_HIDDEN || hdr.kind == PL_ACT_GRAD;
        if (rows &&
            (hdr.dtype != lim.dtype ||
             (const char *)payload < (const char *)copy ||
             (const char *)payload + n * pl_act_dtype_size((pl_act_dtype_t)hdr.dtype) !=
                 (const char *)copy + size))
            abort();
        /* the payload widened to f32 and narrowed again must give the same bytes */
        if (rows) {
            scratch = malloc(n * sizeof(float) + 1);
            pl_act_payload_f32(&hdr, payload, scratch, &f32);
            src = f32;
        }
        /* a sum's doubles read and written again must give the same bytes, NaNs included */
        if (hdr.kind == PL_ACT_SUM) {
            if (hdr.dim == 0 || hdr.dim > PL_ACT_SUM_MAX ||
                (const char *)payload + 8 * (size_t)hdr.dim != (const char *)copy + size)
                abort();
            pl_act_payload_f64(&hdr, payload, sums);
            src = sums;
        }
        if (pl_act_encode(&hdr, seqs, src, &again, &again_len) != PL_OK) {
            fprintf(stderr, "accepted but not re-encodable: %s\n", pl_error_msg());
            abort();
        }
        if (again_len != size || memcmp(again, copy, size) != 0)
            abort();
        free(again);
        free(scratch);
    }
    free(copy);
    return 0;
}
