/* GEMM context checks that need no device: creating one never fails for want of a working
 * vendor library, and its description says which GEMM runs and why (pl-*-parity --host-only). */
#include "backends/cuda/test/parity.h"

#include <string.h>

void pt_blas_run(pt_ctx_t *t)
{
    pl_gpu_blas_t *b = NULL;
    char why[256] = "";
    bool loadable = pl_gpu_blas_available(why, sizeof(why));
    pl_status_t st = pl_gpu_blas_create(NULL, true, &b);
    fprintf(t->log, "# gemm context: vendor library %s%s%s\n", loadable ? "loads" : "absent",
            loadable ? "" : ": ", why);
    if (!pt_check(t, st == PL_OK && b, "gemm context: created (%s)", st ? pl_error_msg() : "ok"))
        return;
    const char *desc = pl_gpu_blas_desc(b);
    if (pl_gpu_blas_vendor(b)) {
        pt_check(t, loadable && strncmp(desc, "cublas ", 7) == 0, "gemm context: vendor, '%s'",
                 desc);
    } else {
        /* loadable but not started (no driver, no memory) falls back and says so */
        pt_check(t, strncmp(desc, "builtin (", 9) == 0 && strlen(desc) > 12, "gemm context: %s",
                 desc);
        if (loadable)
            pt_check(t, strstr(desc, "setup failed") != NULL,
                     "gemm context: a loadable library that did not start is named as such");
    }
    pl_gpu_blas_destroy(&b);
    pt_check(t, b == NULL, "gemm context: destroy clears the pointer");
    pl_gpu_blas_create(NULL, false, &b);
    pt_check(t, b && !pl_gpu_blas_vendor(b) && strstr(pl_gpu_blas_desc(b), "PL_GPU_GEMM"),
             "gemm context: vendor not wanted gives '%s'", b ? pl_gpu_blas_desc(b) : "-");
    pl_gpu_blas_destroy(&b);
}
