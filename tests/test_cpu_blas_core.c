/* OpenBLAS's core type: pipeld restarts on the tuned core exactly where cpuid says OpenBLAS fell
 * back to generic kernels, logs it once, and every process of a run computes on the same core. */
#include "backends/cpu/cpu_blas_core.h"
#include "cluster_util.h"

#include <cblas.h>
#include <strings.h>

/* The reference: OpenBLAS's x86 cores with AVX2-class kernels, and the best one cpuid allows
 * (gcc's __builtin_cpu_supports checks the OS's XCR0 state as well) */
static bool s_tuned(const char *core)
{
    static const char *const tuned[] = {"haswell", "zen", "skylakex", "cooperlake",
                                        "sapphirerapids"};
    for (size_t i = 0; i < sizeof(tuned) / sizeof(tuned[0]); i++)
        if (strcasecmp(core, tuned[i]) == 0)
            return true;
    return false;
}

static const char *s_best(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}

/* The core OpenBLAS picks by itself here: this suite's own restart (blas_core_fix.c) noted it;
 * without one the variable is unset and the core in use is OpenBLAS's own pick. */
static const char *s_own_core(void)
{
    const char *own = pl_cpu_blas_core_own();
    if (!own)
        cr_skip_test("%s is set from outside: OpenBLAS's own pick is unknown here",
                     PL_CPU_BLAS_CORE_ENV);
    return own;
}

/* pipeld's first seconds, with the variable unset (or set to `preset`) */
static char *s_pipeld_log(const char *preset)
{
    char *out = NULL, env[96];
    int port = tc_free_port();
    cr_assert(port > 0);
    if (preset)
        snprintf(env, sizeof(env), "env %s=%s", PL_CPU_BLAS_CORE_ENV, preset);
    else
        snprintf(env, sizeof(env), "env -u %s", PL_CPU_BLAS_CORE_ENV);
    int rc = tc_sh(&out,
                   "%s timeout -s TERM 3 %s/pipeld --name blas --threads 1 --log-level info "
                   "--coordinator tcp://127.0.0.1:%d 2>&1",
                   env, tc_bin(), port);
    cr_assert(rc == 0 || rc == 124, "pipeld exited %d:\n%s", rc, out);
    return out;
}

Test(cpu_blas_core, best_as_cpuid_says)
{
    const char *best = pl_cpu_blas_core_best(), *want = s_best();
    cr_assert((best == NULL) == (want == NULL), "best %s, cpuid %s", best ? best : "none",
              want ? want : "none");
    if (want)
        cr_assert_str_eq(best, want);
}

Test(cpu_blas_core, suite_runs_on_the_daemons_core)
{
    const char *own = s_own_core(), *best = s_best();
    bool restart = !s_tuned(own) && best;
    if (restart) {
        cr_assert_str_eq(openblas_get_corename(), best, "own %s", own);
        cr_assert_str_eq(getenv(PL_CPU_BLAS_CORE_ENV), best);
    } else {
        cr_assert_null(getenv(PL_CPU_BLAS_CORE_FROM_ENV));
        cr_assert_str_eq(openblas_get_corename(), own);
    }
}

Test(cpu_blas_core, pipeld_restarts_as_cpuid_says, .timeout = 60)
{
    const char *own = s_own_core(), *best = s_best();
    bool restart = !s_tuned(own) && best;
    char *log = s_pipeld_log(NULL), want[160];
    const char *line = strstr(log, "restarted on");
    if (restart) {
        snprintf(want, sizeof(want), "OpenBLAS picked its generic %s kernels: restarted on %s", own,
                 best);
        cr_assert(strstr(log, want), "no '%s' in pipeld's log:\n%s", want, log);
        cr_assert_eq(strstr(line + 1, "restarted on"), NULL, "more than one restart:\n%s", log);
    } else {
        cr_assert_null(line, "pipeld restarted on a tuned core %s:\n%s", own, log);
    }
    free(log);
}

/* a core the user asked for stays: no restart, no line, whatever OpenBLAS picked */
Test(cpu_blas_core, pipeld_keeps_a_chosen_core, .timeout = 60)
{
    char *log = s_pipeld_log("Prescott");
    cr_assert_null(strstr(log, "restarted on"), "pipeld restarted:\n%s", log);
    cr_assert(strstr(log, "blas"), "pipeld did not start:\n%s", log);
    free(log);
}
