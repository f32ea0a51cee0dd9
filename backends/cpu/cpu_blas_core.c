/* OpenBLAS's core type on this CPU: whether the one it picked has tuned kernels, and the one to
 * ask for where it fell back to generic code (0.3.21 calls a 2023 Xeon "Prescott"). */
#include "backends/cpu/cpu_blas_core.h"

#include "backends/cpu/cpu_gemm.h"
#include "common/util.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS cores with AVX2 (or better) kernels. Another name on a machine whose kernels here
 * use AVX2 means OpenBLAS did not recognise the CPU and fell back to old generic code: its sgemm
 * then runs at a third of cpu_gemm.c's kernel. */
static const char *const s_tuned[] = {"haswell",        "zen",        "skylakex",   "cooperlake",
                                      "sapphirerapids", "neoversen1", "neoversen2", "neoversev1",
                                      "armv8sve",       "a64fx"};

bool pl_cpu_blas_core_tuned(void)
{
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < PL_ARRAY_SIZE(s_tuned); i++)
        if (strcasecmp(core, s_tuned[i]) == 0)
            return true;
    return false;
}

const char *pl_cpu_blas_core_best(void)
{
    /* pl_cpu_isa()'s cpuid and XCR0 checks are the ones these cores' kernels need: SkylakeX
     * AVX-512 F/BW/VL (and DQ/CD, which every such CPU has), Haswell AVX2 + FMA */
    switch (pl_cpu_isa()) {
    case PL_CPU_ISA_AVX512:
        return "SkylakeX";
    case PL_CPU_ISA_AVX2:
        return "Haswell";
    default:
        return NULL;
    }
}

const char *pl_cpu_blas_core_fix(char **argv)
{
    const char *best = pl_cpu_blas_core_best();
    if (getenv(PL_CPU_BLAS_CORE_ENV) || pl_cpu_blas_core_tuned() || !best)
        return NULL;
    /* OpenBLAS reads the variable once, when it loads: only a fresh image of this program
     * sees it. The variable set, the new image returns above and does not exec again. */
    if (setenv(PL_CPU_BLAS_CORE_ENV, best, 1) == 0)
        execv("/proc/self/exe", argv);
    fprintf(stderr, "%s: could not restart with %s=%s (%s); OpenBLAS stays on its %s kernels\n",
            argv[0], PL_CPU_BLAS_CORE_ENV, best, strerror(errno), openblas_get_corename());
    unsetenv(PL_CPU_BLAS_CORE_ENV);
    return openblas_get_corename();
}
