/* OpenBLAS's core type on this CPU: whether it has tuned kernels, and a restart that asks for
 * the best one the CPU supports where OpenBLAS fell back to generic code. */
#ifndef PL_BACKENDS_CPU_CPU_BLAS_CORE_H
#define PL_BACKENDS_CPU_CPU_BLAS_CORE_H

#include <stdbool.h>

/* The variable OpenBLAS reads its core type from, once, when it loads. */
#define PL_CPU_BLAS_CORE_ENV "OPENBLAS_CORETYPE"
/* "PID:CORE": the process pl_cpu_blas_core_fix restarted and the core OpenBLAS had picked by
 * itself there, for the new image and the programs it starts (they inherit both variables). */
#define PL_CPU_BLAS_CORE_FROM_ENV "PL_BLAS_CORE_FROM"

/* Whether the core OpenBLAS runs is one with AVX2-class (or better) kernels. */
bool pl_cpu_blas_core_tuned(void);
/* The best OpenBLAS core type this CPU supports by cpuid and XCR0 (pl_cpu_isa): "SkylakeX" with
 * AVX-512, "Haswell" with AVX2 + FMA; NULL otherwise. */
const char *pl_cpu_blas_core_best(void);
/* Call first in main, before any thread starts: where OpenBLAS runs untuned kernels, the
 * variable is unset or empty and pl_cpu_blas_core_best names a core, set the variable and exec this
 * program again with argv (it does not return then). Returns NULL when nothing was needed;
 * otherwise the exec failed, the reason is on stderr and the core in use is returned. */
const char *pl_cpu_blas_core_fix(char **argv);
/* Where this process is pl_cpu_blas_core_fix's restart, the core OpenBLAS had picked by itself
 * before it; NULL otherwise (a program started by a restarted one is not itself a restart). */
const char *pl_cpu_blas_core_restarted(void);
/* The core OpenBLAS picks by itself on this machine: from the marker where this process or one
 * that started it restarted, the core in use where the variable is unset; NULL where the
 * variable was set from outside, even empty (OpenBLAS's own pick is then unknown: an empty or
 * unknown name makes it take another fallback than an unset variable does). */
const char *pl_cpu_blas_core_own(void);
/* The one info line a program logs, once its log is set up, where it is that restart. */
void pl_cpu_blas_core_log(void);

#endif
