/* OpenBLAS's core type on this CPU: whether it has tuned kernels, and a restart that asks for
 * the best one the CPU supports where OpenBLAS fell back to generic code. */
#ifndef PL_BACKENDS_CPU_CPU_BLAS_CORE_H
#define PL_BACKENDS_CPU_CPU_BLAS_CORE_H

#include <stdbool.h>

/* The variable OpenBLAS reads its core type from, once, when it loads. */
#define PL_CPU_BLAS_CORE_ENV "OPENBLAS_CORETYPE"

/* Whether the core OpenBLAS runs is one with AVX2-class (or better) kernels. */
bool pl_cpu_blas_core_tuned(void);
/* The best OpenBLAS core type this CPU supports by cpuid and XCR0 (pl_cpu_isa): "SkylakeX" with
 * AVX-512, "Haswell" with AVX2 + FMA; NULL otherwise. */
const char *pl_cpu_blas_core_best(void);
/* Call first in main, before any thread starts: where OpenBLAS runs untuned kernels, the
 * variable is not set and pl_cpu_blas_core_best names a core, set the variable and exec this
 * program again with argv (it does not return then). Returns NULL when nothing was needed;
 * otherwise the exec failed, the reason is on stderr and the core in use is returned. */
const char *pl_cpu_blas_core_fix(char **argv);

#endif
