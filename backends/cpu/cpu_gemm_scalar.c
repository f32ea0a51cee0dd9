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
