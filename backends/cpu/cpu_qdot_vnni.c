/* The AVX-512 table's quantized dots on CPUs with AVX-512 VNNI: cpu_qdot_x86_tmpl.h's kernels with
 * vpdpbusd / vpdpwssd, one instruction where AVX2 needs a multiply-add and an add (or a second
 * multiply-add), the same exact integer sums; compiled for that target, called only when cpuid
 * reports it (pl_cpu_qdot_table). Q6_K is cpu_qdot_avx512.c's. */
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#define S_SUFFIX vnni
#define S_DOT_U8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define S_ACC_I16(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#define S_TWO_CHAINS(R) ((R) >= 3) /* a lone row or two would wait on vpdpwssd */
#include "backends/cpu/cpu_qdot_x86_tmpl.h"

const pl_cpu_qdot_table_t pl_cpu_qdot_avx512_vnni = {
    pl_cpu_q8_0_dot_vnni,  pl_cpu_q4_0_dot_vnni,  pl_cpu_q4_k_dot_vnni,  pl_cpu_q5_k_dot_vnni,
    pl_cpu_q6_k_dot_avx512, pl_cpu_q8_0_rows_vnni, pl_cpu_q4_0_rows_vnni, pl_cpu_q4_k_rows_vnni,
    pl_cpu_q5_k_rows_vnni, pl_cpu_q6_k_rows_avx512};
#pragma GCC pop_options
#endif
