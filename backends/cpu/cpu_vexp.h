/* e^x for SwiGLU as one fixed sequence of IEEE operations (Cephes' expf: a range reduction and a
 * degree-7 polynomial, ~1 ulp), so that the scalar and the SIMD paths give the same bits. */
#ifndef PL_BACKENDS_CPU_CPU_VEXP_H
#define PL_BACKENDS_CPU_CPU_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* x is clamped to [LO, HI]: 2^n stays a normal float for n = rint(x log2 e) in -126..127. */
#define PL_CPU_VEXP_LO (-87.0f)
#define PL_CPU_VEXP_HI 88.0f
#define PL_CPU_VEXP_LOG2E 1.44269504088896341f
#define PL_CPU_VEXP_LN2_HI 0.693359375f /* ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 9 bits */
#define PL_CPU_VEXP_LN2_LO (-2.12194440e-4f)
#define PL_CPU_VEXP_P0 1.9875691500e-4f
#define PL_CPU_VEXP_P1 1.3981999507e-3f
#define PL_CPU_VEXP_P2 8.3334519073e-3f
#define PL_CPU_VEXP_P3 4.1665795894e-2f
#define PL_CPU_VEXP_P4 1.6666665459e-1f
#define PL_CPU_VEXP_P5 5.0000001201e-1f

/* The scalar form; a SIMD form must do these steps in this order, one rounding each (the files
 * that use it are built with -ffp-contract=off, so no a * b + c is fused behind our back). The
 * clamps are written as x86's minps / maxps read them (the second operand where one is NaN). */
static inline float pl_cpu_vexp(float x)
{
    x = x < PL_CPU_VEXP_HI ? x : PL_CPU_VEXP_HI;
    x = x > PL_CPU_VEXP_LO ? x : PL_CPU_VEXP_LO;
    float n = rintf(x * PL_CPU_VEXP_LOG2E);
    float r = fmaf(n, -PL_CPU_VEXP_LN2_HI, x);
    r = fmaf(n, -PL_CPU_VEXP_LN2_LO, r);
    float p = PL_CPU_VEXP_P0;
    p = fmaf(p, r, PL_CPU_VEXP_P1);
    p = fmaf(p, r, PL_CPU_VEXP_P2);
    p = fmaf(p, r, PL_CPU_VEXP_P3);
    p = fmaf(p, r, PL_CPU_VEXP_P4);
    p = fmaf(p, r, PL_CPU_VEXP_P5);
    p = fmaf(p, r * r, r);
    p = p + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* One SwiGLU element, gate * sigmoid(gate) * up as the SIMD paths compute it. */
static inline float pl_cpu_swiglu_one(float g, float u)
{
    float e = pl_cpu_vexp(-g);
    float d = 1.0f + e;
    return g / d * u;
}

#endif
