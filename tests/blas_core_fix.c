/* Linked into every suite: the test binary restarts on OpenBLAS's tuned core before criterion's
 * main, as the daemons and pl-generate it starts do, so that references computed here match. */
#include "backends/cpu/cpu_blas_core.h"

/* glibc passes an initialiser main's arguments; this runs after OpenBLAS's own (it loaded
 * first) and before criterion starts a thread or a worker */
__attribute__((constructor)) static void s_blas_core_fix(int argc, char **argv, char **envp)
{
    (void)argc;
    (void)envp;
    pl_cpu_blas_core_fix(argv);
}
