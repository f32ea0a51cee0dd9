/* GPU discovery, opening and calibration for the CUDA and HIP plugins: which devices the
 * runtime sees and the build can run on, and a short measurement of GEMM rate and bandwidth. */
#include "backends/gpu/gpu_internal.h"

#include "common/log.h"
#include "common/util.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PL_GPU_ARCHS
#define PL_GPU_ARCHS "" /* set by the build: "80,90" or "gfx90a,gfx908,..." */
#endif

/* Device memory the runtime context, module images and cuBLAS workspace take before any stage
 * allocates: subtracted from what a device advertises. */
#define S_CONTEXT_RESERVE ((uint64_t)512 << 20)

/* "message (name)", or the name alone where the runtime's message is just the name (HIP). */
static const char *s_err_text(cudaError_t e, char *buf, size_t len)
{
    const char *msg = cudaGetErrorString(e), *name = cudaGetErrorName(e);
    if (strcmp(msg, name) == 0)
        snprintf(buf, len, "%s", name);
    else
        snprintf(buf, len, "%s (%s)", msg, name);
    return buf;
}

pl_status_t pl_gpu_status(cudaError_t e, const char *what)
{
    char text[256];
    if (e == cudaSuccess)
        return PL_OK;
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return pl_error(e == cudaErrorMemoryAllocation ? PL_ERR_NOMEM : PL_ERR_BACKEND, "%s: %s", what,
                    s_err_text(e, text, sizeof(text)));
}

bool pl_gpu_env_flag(const char *name, bool dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    return !(strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "false") == 0 ||
             strcmp(v, "builtin") == 0);
}

/* Whether this build has code that runs on the device, and if not why (into why). */
static bool s_arch_ok(const pl_gpu_prop_t *prop, char *why, size_t why_len)
{
    const char *list = PL_GPU_ARCHS;
    if (!*list)
        return true;
#if defined(__HIP_PLATFORM_AMD__)
    char arch[64];
    snprintf(arch, sizeof(arch), "%.63s", prop->gcnArchName);
    arch[strcspn(arch, ":")] = '\0';
    size_t n = strlen(arch);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, arch, n) == 0)
            return true;
        p += len + (p[len] == ',');
    }
    snprintf(why, why_len, "%.64s: %s not among the built targets %.64s", prop->name, arch, list);
    return false;
#else
    /* sm_XY code runs on X.Y and later X.*; PTX of the newest target JITs on anything newer */
    int cc = prop->major * 10 + prop->minor, lowest = 1000;
    for (const char *p = list; *p;) {
        int v = atoi(p);
        if (v > 0 && v < lowest)
            lowest = v;
        size_t len = strcspn(p, ",");
        p += len + (p[len] == ',');
    }
    if (cc >= lowest)
        return true;
    snprintf(why, why_len, "%.64s: compute capability %d.%d below the lowest built target sm_%d",
             prop->name, prop->major, prop->minor, lowest);
    return false;
#endif
}

static pl_status_t s_no_runtime(cudaError_t e)
{
    char text[256];
    s_err_text(e, text, sizeof(text));
    (void)cudaGetLastError();
#if defined(__HIP_PLATFORM_AMD__)
    bool kfd = access("/dev/kfd", F_OK) == 0;
    return pl_error(PL_ERR_NO_DEVICE, "no ROCm device%s: hipGetDeviceCount: %s",
                    kfd ? "" : " (no /dev/kfd: amdgpu driver not loaded)", text);
#else
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv)
        return pl_error(PL_ERR_NO_DEVICE,
                        "no CUDA driver (libcuda.so.1 not loadable): "
                        "cudaGetDeviceCount: %s",
                        text);
    dlclose(drv);
    return pl_error(PL_ERR_NO_DEVICE, "no CUDA device: cudaGetDeviceCount: %s", text);
#endif
}

static void s_fill_info(int index, int rt, const pl_gpu_prop_t *prop, pl_be_device_info_t *info)
{
    memset(info, 0, sizeof(*info));
    snprintf(info->backend, sizeof(info->backend), "%s", PL_GPU_BACKEND);
    snprintf(info->name, sizeof(info->name), "%.127s", prop->name);
    info->index = index;
    info->cores = prop->multiProcessorCount;
    uint64_t total = prop->totalGlobalMem, free_b = 0, smi_total = 0;
    uint64_t usable = total;
    if (pl_gpu_smi_memory(rt, &free_b, &smi_total) == PL_OK && free_b < usable)
        usable = free_b;
    info->mem_bytes = usable > S_CONTEXT_RESERVE ? usable - S_CONTEXT_RESERVE : 0;
#if defined(__HIP_PLATFORM_AMD__)
    snprintf(info->isa, sizeof(info->isa), "%.95s", prop->gcnArchName);
    info->isa[strcspn(info->isa, ":")] = '\0';
#else
    snprintf(info->isa, sizeof(info->isa), "sm_%d%d", prop->major, prop->minor);
#endif
}

pl_status_t pl_gpu_runtime_index(int index, int *rt_p, pl_gpu_prop_t *prop)
{
    int count = 0, usable = 0;
    char why[256];
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return s_no_runtime(e);
    for (int i = 0; i < count; i++) {
        if ((e = cudaGetDeviceProperties(prop, i)) != cudaSuccess)
            return pl_gpu_status(e, "cudaGetDeviceProperties");
        if (!s_arch_ok(prop, why, sizeof(why)))
            continue;
        if (usable++ == index) {
            *rt_p = i;
            return PL_OK;
        }
    }
    return pl_error(PL_ERR_NOT_FOUND, "%s device %d: only %d usable", PL_GPU_BACKEND, index,
                    usable);
}

pl_status_t pl_gpu_probe(pl_be_device_info_t *infos, int max, int *n_p)
{
    int count = 0, n = 0;
    char skipped[256] = "";
    pl_gpu_prop_t prop;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return s_no_runtime(e);
    if (count <= 0)
        return pl_error(PL_ERR_NO_DEVICE, "no %s device", PL_GPU_BACKEND);
    for (int i = 0; i < count; i++) {
        char why[256];
        if ((e = cudaGetDeviceProperties(&prop, i)) != cudaSuccess)
            return pl_gpu_status(e, "cudaGetDeviceProperties");
        if (!s_arch_ok(&prop, why, sizeof(why))) {
            pl_log_warn("%s device %d skipped: %s", PL_GPU_BACKEND, i, why);
            if (!skipped[0])
                snprintf(skipped, sizeof(skipped), "%s", why);
            continue;
        }
        if (n < max)
            s_fill_info(n, i, &prop, &infos[n]);
        n++;
    }
    if (n == 0)
        return pl_error(PL_ERR_NO_DEVICE, "no usable %s device: %s", PL_GPU_BACKEND, skipped);
    *n_p = n < max ? n : max;
    return PL_OK;
}

pl_status_t pl_gpu_open(int index, int threads, void **dev_p)
{
    pl_gpu_prop_t prop;
    int rt = -1;
    pl_status_t st;
    size_t free_b = 0, total_b = 0;
    (void)threads;

    if (index < 0)
        return pl_error(PL_ERR_RANGE, "%s device index %d", PL_GPU_BACKEND, index);
    if ((st = pl_gpu_runtime_index(index, &rt, &prop)))
        return st;
    if ((st = pl_gpu_status(cudaSetDevice(rt), "cudaSetDevice")))
        return st;
    /* create the context now, so that a broken device fails here and not in a stage */
    if ((st = pl_gpu_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")))
        return st;
    pl_gpu_dev_t *dev = calloc(1, sizeof(*dev));
    if (!dev)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    dev->index = rt;
    dev->sm_count = prop.multiProcessorCount;
    s_fill_info(index, rt, &prop, &dev->info);
    dev->info.mem_bytes = free_b > S_CONTEXT_RESERVE ? free_b - S_CONTEXT_RESERVE : 0;
    *dev_p = dev;
    return PL_OK;
}

void pl_gpu_close(void *dev)
{
    free(dev);
}

/* Time `reps` calls of fn (enqueued on s) with events; seconds per call. Every event call is
 * checked and the time must be positive and finite: a failed or empty measurement would hand the
 * planner a zero time, an infinite rate. */
typedef pl_status_t (*s_work_fn)(void *ctx);

static pl_status_t s_time(cudaStream_t s, s_work_fn fn, void *ctx, double min_s, double *per_p)
{
    cudaEvent_t a = NULL, b = NULL;
    pl_status_t st;
    float ms = 0.0f;
    int reps = 0;
    if ((st = pl_gpu_status(cudaEventCreate(&a), "cudaEventCreate")))
        return st;
    if ((st = pl_gpu_status(cudaEventCreate(&b), "cudaEventCreate")))
        goto err_a;
    if ((st = fn(ctx)) || (st = pl_gpu_status(cudaStreamSynchronize(s), "warm-up")))
        goto err_b;
    double t0 = pl_now();
    if ((st = pl_gpu_status(cudaEventRecord(a, s), "cudaEventRecord")))
        goto err_b;
    do { /* batches of 5 keep the queue full; the wall clock only decides when to stop */
        for (int i = 0; i < 5; i++, reps++)
            if ((st = fn(ctx)))
                goto err_b;
        if ((st = pl_gpu_status(cudaStreamSynchronize(s), "calibration")))
            goto err_b;
    } while (pl_now() - t0 < min_s && reps < 500);
    if ((st = pl_gpu_status(cudaEventRecord(b, s), "cudaEventRecord")) ||
        (st = pl_gpu_status(cudaEventSynchronize(b), "cudaEventSynchronize")) ||
        (st = pl_gpu_status(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime")))
        goto err_b;
    if (!(ms > 0.0f) || !isfinite(ms)) {
        st = pl_error(PL_ERR_BACKEND, "calibration: %d calls timed at %g ms", reps, (double)ms);
        goto err_b;
    }
    *per_p = ms / 1000.0 / reps;
err_b:
    cudaEventDestroy(b);
err_a:
    cudaEventDestroy(a);
    return st;
}

typedef struct {
    pl_gpu_blas_t *blas;
    void *x, *w;
    float *y;
    pl_dtype_t x_dt;
    int m, n, k;
    float *buf, *sink;
    size_t n_floats;
    cudaStream_t s;
} s_calib_t;

static pl_status_t s_gemm_work(void *ctx)
{
    s_calib_t *c = ctx;
    return pl_gpu_gemm(c->blas, c->x, c->x_dt, c->m, c->k, c->w, PL_DT_BF16, c->n, c->y, false);
}

static pl_status_t s_read_work(void *ctx)
{
    s_calib_t *c = ctx;
    return pl_gpu_status(pl_gpu_read_sum(c->buf, c->n_floats, c->sink, c->s), "read kernel");
}

pl_status_t pl_gpu_calibrate(void *dev_v, pl_be_calib_t *calib)
{
    pl_gpu_dev_t *dev = dev_v;
    s_calib_t c;
    pl_status_t st;
    size_t free_b = 0, total_b = 0;
    double per = 0.0;
    pl_be_calib_t out = {0}; /* no decode row rate: the planner takes decode as a roofline */

    memset(&c, 0, sizeof(c));
    if ((st = pl_gpu_status(cudaSetDevice(dev->index), "cudaSetDevice")))
        return st;
    if ((st = pl_gpu_status(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking),
                            "cudaStreamCreate")))
        return st;
    if ((st = pl_gpu_blas_create(c.s, pl_gpu_env_flag("PL_GPU_GEMM", true), &c.blas)))
        goto err_stream;
    if ((st = pl_gpu_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")))
        goto err_blas;

    /* bf16 weights: the dtype GPU stages usually run; the built-in path is slower, so smaller */
    bool vendor = pl_gpu_blas_vendor(c.blas);
    c.m = c.n = c.k = vendor ? 4096 : 2048;
    c.x_dt = vendor ? PL_DT_BF16 : PL_DT_F32;
    size_t xb = (size_t)c.m * c.k * pl_dtype_size(c.x_dt), wb = (size_t)c.n * c.k * 2;
    size_t yb = (size_t)c.m * c.n * 4;
    c.n_floats = ((size_t)256 << 20) / 4;
    while (c.n_floats * 4 > free_b / 4 && c.n_floats > (1u << 20))
        c.n_floats /= 2;
    if (xb + wb + yb + c.n_floats * 4 > free_b) {
        st = pl_error(PL_ERR_NOMEM, "calibration needs %zu MiB, %zu MiB free",
                      (xb + wb + yb + c.n_floats * 4) >> 20, free_b >> 20);
        goto err_blas;
    }
    if ((st = pl_gpu_status(cudaMalloc(&c.x, xb), "cudaMalloc")) ||
        (st = pl_gpu_status(cudaMalloc(&c.w, wb), "cudaMalloc")) ||
        (st = pl_gpu_status(cudaMalloc((void **)&c.y, yb), "cudaMalloc")) ||
        (st = pl_gpu_status(cudaMalloc((void **)&c.buf, c.n_floats * 4), "cudaMalloc")) ||
        (st = pl_gpu_status(cudaMalloc((void **)&c.sink, (size_t)pl_gpu_read_blocks() * 4),
                            "cudaMalloc")))
        goto err_mem;
    /* 0x3f bytes: 0.747 in f32 and bf16, finite products. On the timing stream: the legacy
     * stream does not order a non-blocking stream's work. */
    if ((st = pl_gpu_status(cudaMemsetAsync(c.x, 0x3f, xb, c.s), "cudaMemsetAsync")) ||
        (st = pl_gpu_status(cudaMemsetAsync(c.w, 0x3f, wb, c.s), "cudaMemsetAsync")) ||
        (st = pl_gpu_status(cudaMemsetAsync(c.buf, 0x3f, c.n_floats * 4, c.s), "cudaMemsetAsync")) ||
        (st = pl_gpu_status(cudaStreamSynchronize(c.s), "calibration setup")))
        goto err_mem;

    if ((st = s_time(c.s, s_gemm_work, &c, 0.15, &per)))
        goto err_mem;
    out.gflops = 2.0 * c.m * c.n * (double)c.k / per / 1e9;
    if ((st = s_time(c.s, s_read_work, &c, 0.1, &per)))
        goto err_mem;
    out.mem_gbps = (double)c.n_floats * 4 / per / 1e9;
    pl_log_info("%s device %d calibrated: %.0f GFLOP/s (%s bf16 %dx%dx%d), %.0f GB/s read",
                PL_GPU_BACKEND, dev->info.index, out.gflops, pl_gpu_blas_desc(c.blas), c.m, c.n,
                c.k, out.mem_gbps);
    *calib = out;

err_mem:
    cudaFree(c.sink);
    cudaFree(c.buf);
    cudaFree(c.y);
    cudaFree(c.w);
    cudaFree(c.x);
err_blas:
    pl_gpu_blas_destroy(&c.blas);
err_stream:
    cudaStreamDestroy(c.s);
    return st;
}
