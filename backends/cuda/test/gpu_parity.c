/* pl-cuda-parity / pl-hip-parity: on a machine with a GPU, check every kernel against a scalar
 * reference and whole stages against the CPU backend. Prints one line per check; exit 1 on any
 * failure, 2 on bad usage, 3 when no device is present. */
#include "backends/cuda/test/parity.h"

#include "common/log.h"
#include "common/util.h"

#include <dlfcn.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *(*pt_gpu_error_msg)(void) = pl_error_msg;

bool pt_compare(pt_ctx_t *t, const char *what, const float *got, const float *want, size_t n,
                double tol)
{
    double max_err = 0.0, max_ref = 0.0;
    size_t worst = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)want[i]);
        if (r > max_ref)
            max_ref = r;
    }
    double bound = tol * (max_ref > 1.0 ? max_ref : 1.0);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= bound)) /* NaN counts as bad */
            bad++;
        if (!(e <= max_err)) {
            max_err = e;
            worst = i;
        }
    }
    bool ok = bad == 0;
    fprintf(t->log, "%s %-58s n=%-8zu max_err=%.3g (at %zu: %.6g vs %.6g) max_ref=%.3g tol=%.1g\n",
            ok ? "PASS" : "FAIL", what, n, max_err, worst, n ? got[worst] : 0.0,
            n ? want[worst] : 0.0, max_ref, tol);
    ok ? t->n_pass++ : t->n_fail++;
    return ok;
}

bool pt_check(pt_ctx_t *t, bool ok, const char *fmt, ...)
{
    va_list ap;
    fprintf(t->log, "%s ", ok ? "PASS" : "FAIL");
    va_start(ap, fmt);
    vfprintf(t->log, fmt, ap);
    va_end(ap);
    fputc('\n', t->log);
    ok ? t->n_pass++ : t->n_fail++;
    return ok;
}

void pt_skip(pt_ctx_t *t, const char *fmt, ...)
{
    va_list ap;
    fprintf(t->log, "SKIP ");
    va_start(ap, fmt);
    vfprintf(t->log, fmt, ap);
    va_end(ap);
    fputc('\n', t->log);
    t->n_skip++;
}

void pt_fill(float *x, size_t n, uint64_t seed, uint64_t stream, float lo, float hi)
{
    uint64_t key = pl_rand_key(seed, stream, 0x9a11);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * pl_rand_uniform(key, i);
}

static float s_round1(float v, pl_dtype_t dt)
{
    if (dt == PL_DT_F16)
        return pl_f16_to_f32(pl_f32_to_f16(v));
    if (dt == PL_DT_BF16)
        return pl_bf16_to_f32(pl_f32_to_bf16(v));
    return v;
}

void pt_round(float *x, size_t n, pl_dtype_t dt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = s_round1(x[i], dt);
}

void *pt_to_dtype(const float *x, size_t n, pl_dtype_t dt)
{
    void *out = malloc(n * pl_dtype_size(dt) + 1);
    if (!out) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        if (dt == PL_DT_F16)
            ((uint16_t *)out)[i] = pl_f32_to_f16(x[i]);
        else if (dt == PL_DT_BF16)
            ((uint16_t *)out)[i] = pl_f32_to_bf16(x[i]);
        else
            ((float *)out)[i] = x[i];
    }
    return out;
}

void pt_from_dtype(const void *src, size_t n, pl_dtype_t dt, float *out)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == PL_DT_F16)
            out[i] = pl_f16_to_f32(((const uint16_t *)src)[i]);
        else if (dt == PL_DT_BF16)
            out[i] = pl_bf16_to_f32(((const uint16_t *)src)[i]);
        else
            out[i] = ((const float *)src)[i];
    }
}

static void s_die(const char *what, cudaError_t e)
{
    fprintf(stderr, "pl-%s-parity: %s: %s\n", PL_GPU_BACKEND, what, cudaGetErrorString(e));
    exit(1);
}

void *pt_dev_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        s_die("cudaMalloc", e);
    return p;
}

void *pt_dev_upload(const void *host, size_t bytes)
{
    void *p = pt_dev_alloc(bytes);
    cudaError_t e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        s_die("upload", e);
    return p;
}

void pt_dev_download(void *host, const void *dev, size_t bytes)
{
    cudaError_t e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        s_die("download", e);
}

void pt_dev_sync(const char *what, cudaError_t launched)
{
    if (launched != cudaSuccess)
        s_die(what, launched);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        s_die(what, e);
}

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: pl-%s-parity [--no-ops] [--model DIR]... [--exact] [--gen N]\n"
            "       [--plugin LIB] [--seed S] [--prompt-ids 1,2,3] [--host-only]\n"
            "  --no-ops       skip the per-op kernel checks\n"
            "  --model DIR    stage checks against the CPU backend on this model (repeatable)\n"
            "  --exact        the models are f32: greedy generations must be identical\n"
            "  --gen N        greedy generation of N tokens, GPU vs CPU (default 16)\n"
            "  --plugin LIB   run the stage checks through this plugin file (dlopen)\n"
            "  --prompt-ids   first generation prompt (printed as GEN cpu: / GEN gpu:)\n"
            "  --host-only    only the checks that need no device (GEMM context), then exit\n",
            PL_GPU_BACKEND);
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"no-ops", no_argument, 0, 'O'},
                                          {"model", required_argument, 0, 'm'},
                                          {"exact", no_argument, 0, 'x'},
                                          {"gen", required_argument, 0, 'g'},
                                          {"plugin", required_argument, 0, 'p'},
                                          {"seed", required_argument, 0, 's'},
                                          {"prompt-ids", required_argument, 0, 'P'},
                                          {"host-only", no_argument, 0, 'H'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    pt_ctx_t t = {.seed = 1, .log = stdout};
    const char *models[16], *plugin = NULL;
    int n_models = 0, gen = 16, c;
    bool ops = true, exact = false, host_only = false;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'O':
            ops = false;
            break;
        case 'm':
            if (n_models < 16)
                models[n_models++] = optarg;
            break;
        case 'x':
            exact = true;
            break;
        case 'g':
            gen = atoi(optarg);
            break;
        case 'p':
            plugin = optarg;
            break;
        case 's':
            t.seed = strtoull(optarg, NULL, 10);
            break;
        case 'P':
            for (char *p = optarg; *p && t.n_prompt < PT_MAX_PROMPT;) {
                t.prompt[t.n_prompt++] = (int32_t)atoi(p);
                p += strcspn(p, ",");
                p += *p == ',';
            }
            break;
        case 'H':
            host_only = true;
            break;
        case 'h':
            s_usage(stdout);
            return 0;
        default:
            s_usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        s_usage(stderr);
        return 2;
    }

    const pl_be_ops_t *gpu = pl_gpu_ops();
    if (plugin) {
        void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
        const pl_be_ops_t *(*entry)(void) =
            h ? (const pl_be_ops_t *(*)(void))dlsym(h, PL_BE_PLUGIN_SYMBOL) : NULL;
        if (!entry) {
            fprintf(stderr, "plugin %s: %s\n", plugin, dlerror());
            return 1;
        }
        gpu = entry();
        const char *(*msg)(void) = (const char *(*)(void))dlsym(h, "pl_error_msg");
        if (msg)
            pt_gpu_error_msg = msg;
        if (ops) {
            /* the static kernels would start a second runtime beside the plugin's */
            fprintf(stderr, "--plugin runs stage checks only; add --no-ops\n");
            return 2;
        }
    }

    if (host_only || ops) /* the static build's own GEMM dispatch, device or not */
        pt_blas_run(&t);
    if (host_only) {
        printf("# parity: %d passed, %d failed, %d skipped\n", t.n_pass, t.n_fail, t.n_skip);
        return t.n_fail ? 1 : 0;
    }

    pl_be_device_info_t info[8];
    int n_dev = 0;
    if (gpu->probe(info, 8, &n_dev) != PL_OK) {
        fprintf(stderr, "no device: %s\n", pt_gpu_error_msg());
        return 3;
    }
    printf("# device: %s %s, %d SMs/CUs, %.1f GiB usable, isa %s%s\n", info[0].backend,
           info[0].name, info[0].cores, info[0].mem_bytes / 1073741824.0, info[0].isa,
           plugin ? " (through the plugin)" : "");

    if (ops)
        pt_ops_run(&t);
    for (int i = 0; i < n_models; i++)
        pt_stage_run(&t, gpu, models[i], gen, exact);

    printf("# parity: %d passed, %d failed, %d skipped\n", t.n_pass, t.n_fail, t.n_skip);
    return t.n_fail ? 1 : 0;
}
