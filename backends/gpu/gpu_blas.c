/* GEMM dispatch for the GPU plugins. cuBLAS is opened with dlopen at run time, so the plugin
 * loads (and reports) on machines without it; without it, or on HIP, the built-in kernels run. */
#include "backends/gpu/gpu_internal.h"

#include "common/log.h"
#include "common/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_WORKSPACE_BYTES (32u << 20) /* cuBLAS' advice for Hopper; also used on older GPUs */

struct pl_gpu_blas {
    cudaStream_t stream;
    bool vendor;
    void *handle;
    void *workspace;
    int gemv_cols; /* output columns per block of the built-in GEMV on this device */
    char desc[320];
};

#if !defined(__HIP_PLATFORM_AMD__)
#include <cublas_api.h> /* types only: every function is reached through dlsym */

typedef cublasStatus_t (*s_create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*s_destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*s_set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*s_set_workspace_fn)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*s_get_version_fn)(cublasHandle_t, int *);
typedef const char *(*s_status_string_fn)(cublasStatus_t);
typedef cublasStatus_t (*s_gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                       int, int, const void *, const void *, cudaDataType, int,
                                       const void *, cudaDataType, int, const void *, void *,
                                       cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

static struct {
    void *lib;
    s_create_fn create;
    s_destroy_fn destroy;
    s_set_stream_fn set_stream;
    s_set_workspace_fn set_workspace;
    s_get_version_fn get_version;
    s_status_string_fn status_string; /* optional */
    s_gemm_ex_fn gemm_ex;
    char name[64];
    char why[256];
} s_cublas;
static pthread_once_t s_cublas_once = PTHREAD_ONCE_INIT;

static void *s_sym(const char *name)
{
    void *p = dlsym(s_cublas.lib, name);
    if (!p && !s_cublas.why[0])
        snprintf(s_cublas.why, sizeof(s_cublas.why), "%s lacks %s", s_cublas.name, name);
    return p;
}

static void s_cublas_load(void)
{
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    const char *env = getenv("PL_CUBLAS_LIB");
    char first_err[160] = "";
    for (size_t i = 0; i < (env ? 1 : PL_ARRAY_SIZE(names)); i++) {
        const char *name = env ? env : names[i];
        s_cublas.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (s_cublas.lib) {
            snprintf(s_cublas.name, sizeof(s_cublas.name), "%s", name);
            break;
        }
        if (!first_err[0])
            snprintf(first_err, sizeof(first_err), "%s", dlerror());
    }
    if (!s_cublas.lib) {
        snprintf(s_cublas.why, sizeof(s_cublas.why), "cuBLAS not loadable: %s", first_err);
        return;
    }
    s_cublas.create = (s_create_fn)s_sym("cublasCreate_v2");
    s_cublas.destroy = (s_destroy_fn)s_sym("cublasDestroy_v2");
    s_cublas.set_stream = (s_set_stream_fn)s_sym("cublasSetStream_v2");
    s_cublas.set_workspace = (s_set_workspace_fn)s_sym("cublasSetWorkspace_v2");
    s_cublas.get_version = (s_get_version_fn)s_sym("cublasGetVersion_v2");
    s_cublas.gemm_ex = (s_gemm_ex_fn)s_sym("cublasGemmEx");
    s_cublas.status_string = (s_status_string_fn)dlsym(s_cublas.lib, "cublasGetStatusString");
    if (s_cublas.why[0]) {
        dlclose(s_cublas.lib);
        s_cublas.lib = NULL;
    }
}

static const char *s_cublas_str(cublasStatus_t s)
{
    return s_cublas.status_string ? s_cublas.status_string(s) : "cuBLAS error";
}

static cudaDataType s_cuda_type(pl_dtype_t dt)
{
    return dt == PL_DT_F32 ? CUDA_R_32F : dt == PL_DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}
#endif

bool pl_gpu_blas_available(char *why, size_t why_len)
{
#if defined(__HIP_PLATFORM_AMD__)
    snprintf(why, why_len, "no hipBLAS/rocBLAS in this build");
    return false;
#else
    pthread_once(&s_cublas_once, s_cublas_load);
    snprintf(why, why_len, "%s", s_cublas.lib ? "" : s_cublas.why);
    return s_cublas.lib != NULL;
#endif
}

#if !defined(__HIP_PLATFORM_AMD__)
/* Create the cuBLAS handle and workspace bound to b->stream; on failure everything taken here is
 * released and the reason is in pl_error_msg(). */
static pl_status_t s_vendor_setup(pl_gpu_blas_t *b)
{
    cublasHandle_t h = NULL;
    cublasStatus_t cs = s_cublas.create(&h);
    pl_status_t st;
    int version = 0;
    if (cs != CUBLAS_STATUS_SUCCESS)
        return pl_error(PL_ERR_BACKEND, "cublasCreate: %s", s_cublas_str(cs));
    if ((st = pl_gpu_status(cudaMalloc(&b->workspace, S_WORKSPACE_BYTES), "cuBLAS workspace")))
        goto err_handle;
    if ((cs = s_cublas.set_workspace(h, b->workspace, S_WORKSPACE_BYTES)) ||
        (cs = s_cublas.set_stream(h, b->stream))) {
        st = pl_error(PL_ERR_BACKEND, "cuBLAS setup: %s", s_cublas_str(cs));
        goto err_workspace;
    }
    s_cublas.get_version(h, &version);
    b->handle = h;
    b->vendor = true;
    snprintf(b->desc, sizeof(b->desc), "cublas %d (%s)", version, s_cublas.name);
    return PL_OK;

err_workspace:
    cudaFree(b->workspace);
    b->workspace = NULL;
err_handle:
    s_cublas.destroy(h);
    return st;
}
#endif

/* Lanes per warp of the current device, for the built-in GEMV's block shape; the device-side
 * code copes with any answer, so a failed query only costs idle warps. */
static int s_warp_size(void)
{
    int dev = 0, warp = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return PL_GPU_MAX_WARP;
    }
    return warp;
}

pl_status_t pl_gpu_blas_create(cudaStream_t stream, bool want_vendor, pl_gpu_blas_t **blas_p)
{
    pl_gpu_blas_t *b = calloc(1, sizeof(*b));
    char why[256] = "disabled by PL_GPU_GEMM";
    if (!b)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    b->stream = stream;
    b->gemv_cols = pl_gpu_gemv_cols(PL_GPU_GEMV_THREADS, s_warp_size());
    if (want_vendor && pl_gpu_blas_available(why, sizeof(why))) {
#if !defined(__HIP_PLATFORM_AMD__)
        /* the library loads but will not start (no memory for the workspace, a broken
         * install): the built-in kernels still run the stage, and the description says why */
        if (s_vendor_setup(b) != PL_OK) {
            snprintf(why, sizeof(why), "cuBLAS setup failed: %s", pl_error_msg());
            pl_log_warn("%s: falling back to the built-in GEMM: %s", PL_GPU_BACKEND, why);
        }
#endif
    }
    if (!b->vendor)
        snprintf(b->desc, sizeof(b->desc), "builtin (%s)", why);
    *blas_p = b;
    return PL_OK;
}

void pl_gpu_blas_destroy(pl_gpu_blas_t **blas_p)
{
    pl_gpu_blas_t *b = blas_p ? *blas_p : NULL;
    if (!b)
        return;
#if !defined(__HIP_PLATFORM_AMD__)
    if (b->handle)
        s_cublas.destroy((cublasHandle_t)b->handle);
#endif
    if (b->workspace)
        cudaFree(b->workspace);
    free(b);
    *blas_p = NULL;
}

bool pl_gpu_blas_vendor(const pl_gpu_blas_t *blas)
{
    return blas->vendor;
}

const char *pl_gpu_blas_desc(const pl_gpu_blas_t *blas)
{
    return blas->desc;
}

pl_status_t pl_gpu_gemm(pl_gpu_blas_t *b, const void *x, pl_dtype_t x_dt, int m, int k,
                        const void *w, pl_dtype_t w_dt, int n, float *y, bool accumulate)
{
    if (m <= 0 || n <= 0)
        return PL_OK;
#if !defined(__HIP_PLATFORM_AMD__)
    if (b->vendor) {
        if (x_dt != w_dt)
            return pl_error(PL_ERR_INVALID, "gemm: input %s and weight %s differ",
                            pl_dtype_name(x_dt), pl_dtype_name(w_dt));
        float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        cudaDataType t = s_cuda_type(w_dt);
        /* column-major view: y^T[n][m] = W[n][k] . x^T[k][m] */
        cublasStatus_t cs = s_cublas.gemm_ex((cublasHandle_t)b->handle, CUBLAS_OP_T, CUBLAS_OP_N, n,
                                             m, k, &alpha, w, t, k, x, t, k, &beta, y, CUDA_R_32F,
                                             n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return pl_error(PL_ERR_BACKEND, "cublasGemmEx (%d x %d x %d, %s): %s", m, n, k,
                            pl_dtype_name(w_dt), s_cublas_str(cs));
        return PL_OK;
    }
#endif
    if (x_dt != PL_DT_F32)
        return pl_error(PL_ERR_INVALID, "gemm: the built-in kernels take f32 input, not %s",
                        pl_dtype_name(x_dt));
    return pl_gpu_status(
        pl_gpu_gemm_builtin((const float *)x, m, k, w, w_dt, n, y, accumulate, b->gemv_cols,
                            b->stream),
        "built-in gemm");
}
