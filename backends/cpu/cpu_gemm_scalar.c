/* The float-type GEMM kernels in portable C: the fallback on machines without AVX2, and the
 * path the vector ones must match bit for bit (see cpu_gemm_tmpl.h). */
#include "common/util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    float v[16];
} s_v16_t;

static inline s_v16_t s_v_ld(const float *p)
{
    s_v16_t r;
    memcpy(r.v, p, sizeof(r.v));
    return r;
}

static inline void s_v_st(float *p, s_v16_t a)
{
    memcpy(p, a.v, sizeof(a.v));
}

static inline s_v16_t s_v_fma(s_v16_t x, s_v16_t w, s_v16_t a)
{
    for (int j = 0; j < 16; j++)
        a.v[j] = fmaf(x.v[j], w.v[j], a.v[j]);
    return a;
}

static inline s_v16_t s_v_ldw_f32(const unsigned char *p)
{
    s_v16_t r;
    memcpy(r.v, p, sizeof(r.v));
    return r;
}

static inline s_v16_t s_v_ldw_f16(const unsigned char *p)
{
    s_v16_t r;
    uint16_t h[16];
    memcpy(h, p, sizeof(h));
    for (int j = 0; j < 16; j++)
        r.v[j] = pl_f16_to_f32(h[j]);
    return r;
}

static inline s_v16_t s_v_ldw_bf16(const unsigned char *p)
{
    s_v16_t r;
    uint16_t h[16];
    memcpy(h, p, sizeof(h));
    for (int j = 0; j < 16; j++)
        r.v[j] = pl_bf16_to_f32(h[j]);
    return r;
}

#define S_ISA scalar
#define S_TR 1
#define S_TO 1
#define S_TO1 1
#include "backends/cpu/cpu_gemm_tmpl.h"

/* The two rows of a packed bf16 pair (cpu_pack.h): word j's low half, then its high half. */
static inline void s_v_ldw2_bf16(const unsigned char *p, s_v16_t *a, s_v16_t *b)
{
    uint32_t w[16];
    memcpy(w, p, sizeof(w));
    for (int j = 0; j < 16; j++) {
        a->v[j] = pl_bf16_to_f32((uint16_t)(w[j] & 0xffffu));
        b->v[j] = pl_bf16_to_f32((uint16_t)(w[j] >> 16));
    }
}

#define S_PR 1
#include "backends/cpu/cpu_pack_tmpl.h"
