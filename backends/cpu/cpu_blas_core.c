/* OpenBLAS's core type on this CPU: whether the one it picked has tuned kernels, and the one to
 * ask for where it fell back to generic code (0.3.21 calls a 2023 Xeon "Prescott"). */
#include "backends/cpu/cpu_blas_core.h"

#include "backends/cpu/cpu_gemm.h"
#include "common/log.h"
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

/* The marker pl_cpu_blas_core_fix leaves for its restart and the programs that inherit it:
 * "PID:CORE", the restarting process (exec keeps the pid) and the core OpenBLAS picked there. */
static bool s_marker(long *pid_out, const char **core_out)
{
    const char *m = getenv(PL_CPU_BLAS_CORE_FROM_ENV);
    char *end;
    if (!m)
        return false;
    errno = 0;
    long pid = strtol(m, &end, 10);
    if (errno || end == m || *end != ':' || pid <= 0 || !end[1])
        return false; /* not ours: ignored */
    *pid_out = pid;
    *core_out = end + 1;
    return true;
}

const char *pl_cpu_blas_core_own(void)
{
    long pid;
    const char *core;
    if (s_marker(&pid, &core))
        return core;
    return getenv(PL_CPU_BLAS_CORE_ENV) ? NULL : openblas_get_corename();
}

const char *pl_cpu_blas_core_restarted(void)
{
    long pid;
    const char *core;
    return s_marker(&pid, &core) && pid == (long)getpid() ? core : NULL;
}

void pl_cpu_blas_core_log(void)
{
    const char *from = pl_cpu_blas_core_restarted();
    if (from)
        pl_log_info("OpenBLAS picked its generic %s kernels: restarted on %s (%s=%s)", from,
                    openblas_get_corename(), PL_CPU_BLAS_CORE_ENV, getenv(PL_CPU_BLAS_CORE_ENV));
}

const char *pl_cpu_blas_core_fix(char **argv)
{
    const char *best = pl_cpu_blas_core_best(), *env = getenv(PL_CPU_BLAS_CORE_ENV);
    char marker[64];
    /* an empty variable asks for no core: OpenBLAS 0.3.21 then takes a fallback of its own
     * (Cooperlake on this Xeon, where unset gives Prescott), so it is judged by the result */
    if ((env && *env) || pl_cpu_blas_core_tuned() || !best)
        return NULL;
    /* OpenBLAS reads the variable once, when it loads: only a fresh image of this program
     * sees it. The variable set, the new image returns above and does not exec again; the
     * programs it starts inherit it, so every process of a run computes on the same kernels. */
    snprintf(marker, sizeof(marker), "%ld:%s", (long)getpid(), openblas_get_corename());
    if (setenv(PL_CPU_BLAS_CORE_FROM_ENV, marker, 1) == 0 &&
        setenv(PL_CPU_BLAS_CORE_ENV, best, 1) == 0)
        execv("/proc/self/exe", argv);
    fprintf(stderr, "%s: could not restart with %s=%s (%s); OpenBLAS stays on its %s kernels\n",
            argv[0], PL_CPU_BLAS_CORE_ENV, best, strerror(errno), openblas_get_corename());
    unsetenv(PL_CPU_BLAS_CORE_ENV);
    unsetenv(PL_CPU_BLAS_CORE_FROM_ENV);
    return openblas_get_corename();
}
