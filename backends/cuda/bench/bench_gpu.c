/* pl-cuda-bench / pl-hip-bench: decode and prefill speed of one GPU stage holding a whole model,
 * printed beside the device's own ceilings measured in the same run (copy and read bandwidth,
 * the vendor GEMM rate on a large product and on the stage's own GEMM shapes). */
#include "backends/gpu/gpu_internal.h"

#include "common/util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model;
    int ctx, prompt, steps, context_fill;
    int batches[8], n_batches;
    bool builtin;
} s_opts_t;

static void s_die(const char *what, pl_status_t st)
{
    fprintf(stderr, "pl-%s-bench: %s: %s (%s)\n", PL_GPU_BACKEND, what, pl_status_str(st),
            pl_error_msg());
    exit(1);
}

static void s_gpu(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        s_die(what, pl_gpu_status(e, what));
}

/* Seconds per call of a device operation, timed with events over enough repetitions. */
typedef void (*s_op_fn)(void *ctx, cudaStream_t s);

static double s_time_op(s_op_fn fn, void *ctx, cudaStream_t s, int reps)
{
    cudaEvent_t a, b;
    float ms = 0.0f;
    fn(ctx, s); /* warm-up */
    s_gpu(cudaStreamSynchronize(s), "warm-up");
    s_gpu(cudaEventCreate(&a), "event");
    s_gpu(cudaEventCreate(&b), "event");
    cudaEventRecord(a, s);
    for (int i = 0; i < reps; i++)
        fn(ctx, s);
    cudaEventRecord(b, s);
    s_gpu(cudaEventSynchronize(b), "timing");
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / 1000.0 / reps;
}

typedef struct {
    void *dst, *src;
    size_t bytes;
    float *sink;
    pl_gpu_blas_t *blas;
    const void *x, *w;
    float *y;
    pl_dtype_t x_dt, w_dt;
    int m, k, n;
} s_op_t;

static void s_copy_op(void *ctx, cudaStream_t s)
{
    s_op_t *o = ctx;
    s_gpu(cudaMemcpyAsync(o->dst, o->src, o->bytes, cudaMemcpyDeviceToDevice, s), "copy");
}

static void s_read_op(void *ctx, cudaStream_t s)
{
    s_op_t *o = ctx;
    s_gpu(pl_gpu_read_sum(o->src, o->bytes / 4, o->sink, s), "read");
}

static void s_gemm_op(void *ctx, cudaStream_t s)
{
    s_op_t *o = ctx;
    pl_status_t st =
        pl_gpu_gemm(o->blas, o->x, o->x_dt, o->m, o->k, o->w, o->w_dt, o->n, o->y, false);
    if (st)
        s_die("gemm", st);
}

/* The machine's own references: copy and read bandwidth over 1 GiB, and the GEMM rate of a
 * large bf16 product through the same GEMM path the stages use. */
static void s_ceilings(cudaStream_t s, double *copy_gbps, double *read_gbps, double *peak_tflops)
{
    s_op_t o;
    memset(&o, 0, sizeof(o));
    o.bytes = (size_t)1 << 30;
    s_gpu(cudaMalloc(&o.src, o.bytes), "alloc");
    s_gpu(cudaMalloc(&o.dst, o.bytes), "alloc");
    s_gpu(cudaMalloc((void **)&o.sink, (size_t)pl_gpu_read_blocks() * 4), "alloc");
    s_gpu(cudaMemset(o.src, 0x3f, o.bytes), "memset");
    double t = s_time_op(s_copy_op, &o, s, 10);
    *copy_gbps = 2.0 * o.bytes / t / 1e9; /* bytes read plus bytes written */
    t = s_time_op(s_read_op, &o, s, 10);
    *read_gbps = o.bytes / t / 1e9;
    cudaFree(o.sink);
    cudaFree(o.dst);
    cudaFree(o.src);

    pl_status_t st = pl_gpu_blas_create(s, true, &o.blas);
    if (st)
        s_die("gemm context", st);
    int big = pl_gpu_blas_vendor(o.blas) ? 8192 : 4096;
    o.m = o.n = o.k = big;
    o.w_dt = PL_DT_BF16;
    o.x_dt = pl_gpu_blas_vendor(o.blas) ? PL_DT_BF16 : PL_DT_F32;
    void *x, *w;
    s_gpu(cudaMalloc(&x, (size_t)big * big * pl_dtype_size(o.x_dt)), "alloc");
    s_gpu(cudaMalloc(&w, (size_t)big * big * 2), "alloc");
    s_gpu(cudaMalloc((void **)&o.y, (size_t)big * big * 4), "alloc");
    s_gpu(cudaMemset(x, 0x3f, (size_t)big * big * pl_dtype_size(o.x_dt)), "memset");
    s_gpu(cudaMemset(w, 0x3f, (size_t)big * big * 2), "memset");
    o.x = x;
    o.w = w;
    t = s_time_op(s_gemm_op, &o, s, 10);
    *peak_tflops = 2.0 * big * big * (double)big / t / 1e12;
    printf("| reference | value |\n|---|---|\n");
    printf("| device-to-device copy, 1 GiB (read + write) | %.0f GB/s |\n", *copy_gbps);
    printf("| read kernel, 1 GiB | %.0f GB/s |\n", *read_gbps);
    printf("| %s bf16 GEMM %dx%dx%d | %.1f TFLOP/s |\n\n", pl_gpu_blas_desc(o.blas), big, big, big,
           *peak_tflops);
    cudaFree(o.y);
    cudaFree(w);
    cudaFree(x);
    pl_gpu_blas_destroy(&o.blas);
}

/* Prefill `n` slots with `len` random tokens each, in forwards of at most max_tokens tokens. */
static void s_fill(const pl_be_ops_t *ops, void *stage, const pl_model_config_t *c, int first,
                   int n, int len, int max_tokens, float *logits)
{
    int32_t *ids = malloc((size_t)max_tokens * sizeof(int32_t));
    int slot[256], pos0[256], n_tok[256];
    int per = max_tokens / len > 0 ? max_tokens / len : 1;
    if (per > 256)
        per = 256;
    for (int s0 = 0; s0 < n; s0 += per) {
        int ns = n - s0 < per ? n - s0 : per, nt = 0;
        for (int i = 0; i < ns; i++) {
            slot[i] = first + s0 + i;
            pos0[i] = 0;
            n_tok[i] = len;
            for (int j = 0; j < len; j++)
                ids[nt++] = (int32_t)(pl_rand_u64(77, (uint64_t)(s0 + i) * 100003 + j) %
                                      (uint64_t)c->vocab);
        }
        pl_be_batch_t b = {.n_seq = ns, .n_tokens = nt, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
        pl_status_t st = ops->stage_forward(stage, &b, ids, logits);
        if (st)
            s_die("prefill", st);
    }
    free(ids);
}

/* Tokens per second of `steps` decode steps of batch B from position `len`. */
static double s_decode(const pl_be_ops_t *ops, void *stage, int B, int len, int steps,
                       float *logits, double *step_s)
{
    int slot[256], pos0[256], n_tok[256];
    int32_t ids[256];
    for (int i = 0; i < B; i++) {
        slot[i] = i;
        n_tok[i] = 1;
        ids[i] = 1 + i;
    }
    double t0 = 0.0;
    for (int k = -3; k < steps; k++) { /* three warm-ups: eager, capture, first replay */
        if (k == 0)
            t0 = pl_now();
        for (int i = 0; i < B; i++)
            pos0[i] = len + k + 3;
        pl_be_batch_t b = {.n_seq = B, .n_tokens = B, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
        pl_status_t st = ops->stage_forward(stage, &b, ids, logits);
        if (st)
            s_die("decode", st);
    }
    double t = pl_now() - t0;
    *step_s = t / steps;
    return (double)B * steps / t;
}

static uint64_t s_matrix_params(const pl_model_config_t *c)
{
    uint64_t H = c->hidden, I = c->intermediate, hd = c->head_dim;
    uint64_t q = c->n_heads * hd, kv = c->n_kv_heads * hd;
    return (uint64_t)c->n_layers * (H * (q + 2 * kv) + q * H + 3 * H * I);
}

/* The stage's own GEMM shapes for T prefill tokens, through its GEMM path and weights. */
static double s_gemm_shapes(pl_gpu_stage_t *st, int T, double peak)
{
    const pl_model_config_t *c = &st->cfg;
    int H = c->hidden, I = c->intermediate, q = c->n_heads * c->head_dim;
    int qkv = q + 2 * c->n_kv_heads * c->head_dim;
    const pl_gpu_layer_t *L = &st->layers[0];
    struct {
        const char *name;
        const void *w;
        int k, n;
    } shapes[] = {{"qkv", L->w_qkv, H, qkv},
                  {"o", L->w_o, q, H},
                  {"gate+up", L->w_gu, H, 2 * I},
                  {"down", L->w_down, I, H}};
    void *x;
    float *y;
    size_t xmax = (size_t)T * (I > H ? (I > q ? I : q) : (H > q ? H : q));
    size_t ymax = (size_t)T * (2 * I > qkv ? 2 * I : qkv);
    s_gpu(cudaMalloc(&x, xmax * pl_dtype_size(st->act_dt)), "alloc");
    s_gpu(cudaMalloc((void **)&y, ymax * 4), "alloc");
    s_gpu(cudaMemset(x, 0, xmax * pl_dtype_size(st->act_dt)), "memset");
    double total_s = 0.0, total_flop = 0.0;
    printf("| GEMM (T=%d) | m x k x n | TFLOP/s | of large-GEMM peak |\n|---|---|---|---|\n", T);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        s_op_t o = {.blas = st->blas,
                    .x = x,
                    .w = shapes[i].w,
                    .y = y,
                    .x_dt = st->act_dt,
                    .w_dt = st->w_dt,
                    .m = T,
                    .k = shapes[i].k,
                    .n = shapes[i].n};
        double t = s_time_op(s_gemm_op, &o, st->stream, 20);
        double flop = 2.0 * T * shapes[i].k * (double)shapes[i].n;
        total_s += t;
        total_flop += flop;
        printf("| %s | %d x %d x %d | %.1f | %.0f%% |\n", shapes[i].name, T, shapes[i].k,
               shapes[i].n, flop / t / 1e12, 100.0 * flop / t / 1e12 / peak);
    }
    printf("| all four, one layer | | %.1f | %.0f%% |\n\n", total_flop / total_s / 1e12,
           100.0 * total_flop / total_s / 1e12 / peak);
    cudaFree(y);
    cudaFree(x);
    return total_s * c->n_layers; /* GEMM time of all layers at this T */
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    static const struct option longs[] = {{"model", required_argument, 0, 'm'},
                                          {"ctx", required_argument, 0, 'c'},
                                          {"prompt", required_argument, 0, 'p'},
                                          {"steps", required_argument, 0, 's'},
                                          {"batches", required_argument, 0, 'b'},
                                          {"fill", required_argument, 0, 'f'},
                                          {"builtin", no_argument, 0, 'B'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    int c;
    *o = (s_opts_t){.ctx = 2048,
                    .prompt = 512,
                    .steps = 64,
                    .context_fill = 128,
                    .batches = {1, 8, 32, 128},
                    .n_batches = 4};
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'c':
            o->ctx = atoi(optarg);
            break;
        case 'p':
            o->prompt = atoi(optarg);
            break;
        case 's':
            o->steps = atoi(optarg);
            break;
        case 'f':
            o->context_fill = atoi(optarg);
            break;
        case 'B':
            o->builtin = true;
            break;
        case 'b': {
            o->n_batches = 0;
            for (char *p = optarg; *p && o->n_batches < 8;) {
                o->batches[o->n_batches++] = atoi(p);
                p += strcspn(p, ",");
                p += *p == ',';
            }
            break;
        }
        default:
            printf("usage: pl-%s-bench --model DIR [--ctx 2048] [--prompt 512] [--steps 64]\n"
                   "       [--fill 128] [--batches 1,8,32,128] [--builtin]\n",
                   PL_GPU_BACKEND);
            return c == 'h' ? 0 : 2;
        }
    }
    if (!o->model || o->ctx < 16 || o->prompt < 1 || o->steps < 1 || o->context_fill < 1 ||
        o->context_fill + o->steps + 3 > o->ctx || o->prompt > o->ctx) {
        fprintf(stderr,
                "pl-%s-bench: --model is required; --fill + --steps + 3 and --prompt "
                "must fit in --ctx\n",
                PL_GPU_BACKEND);
        return 2;
    }
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] < 1 || o->batches[i] > 256) {
            fprintf(stderr, "pl-%s-bench: batch %d outside 1..256\n", PL_GPU_BACKEND,
                    o->batches[i]);
            return 2;
        }
    return -1;
}

int main(int argc, char **argv)
{
    s_opts_t o;
    int rc = s_parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (o.builtin)
        setenv("PL_GPU_GEMM", "builtin", 1);

    const pl_be_ops_t *ops = pl_gpu_ops();
    pl_be_device_info_t info[8];
    int n_dev = 0;
    pl_status_t st = ops->probe(info, 8, &n_dev);
    if (st)
        s_die("probe", st);
    void *dev = NULL;
    if ((st = ops->open(0, 0, &dev)))
        s_die("open", st);
    printf("# pl-%s-bench: %s (%s, %d SMs/CUs, %.1f GiB usable)\n\n", PL_GPU_BACKEND, info[0].name,
           info[0].isa, info[0].cores, info[0].mem_bytes / 1073741824.0);

    cudaStream_t s;
    s_gpu(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    double copy_gbps, read_gbps, peak;
    s_ceilings(s, &copy_gbps, &read_gbps, &peak);
    pl_be_calib_t cal;
    if ((st = ops->calibrate(dev, &cal)))
        s_die("calibrate", st);
    printf("calibrate(): %.0f GFLOP/s, %.0f GB/s\n\n", cal.gflops, cal.mem_gbps);

    pl_model_t *model = NULL;
    if ((st = pl_model_open(o.model, &model)))
        s_die("model", st);
    const pl_model_config_t *c = pl_model_config(model);
    int max_b = 1;
    for (int i = 0; i < o.n_batches; i++)
        max_b = o.batches[i] > max_b ? o.batches[i] : max_b;
    int max_tokens = o.prompt * 4 > max_b ? o.prompt * 4 : max_b;
    pl_be_stage_params_t p = {.first_layer = 0,
                              .last_layer = c->n_layers - 1,
                              .has_embed = true,
                              .has_head = true,
                              .max_seqs = max_b,
                              .max_ctx = o.ctx,
                              .max_tokens = max_tokens};
    void *stage_v = NULL;
    double t0 = pl_now();
    if ((st = ops->stage_load(dev, model, &p, &stage_v)))
        s_die("stage load", st);
    pl_gpu_stage_t *stage = stage_v;
    uint64_t mparams = s_matrix_params(c) + (uint64_t)c->vocab * c->hidden;
    double wbytes = (double)mparams * pl_dtype_size(stage->w_dt);
    printf("model %s: %d layers, hidden %d, heads %d/%d, inter %d, vocab %d, %s, %.2f B matrix "
           "params (+ LM head); loaded in %.1f s; gemm %s\n\n",
           o.model, c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->intermediate, c->vocab,
           pl_dtype_name(stage->w_dt), mparams / 1e9, pl_now() - t0, pl_gpu_blas_desc(stage->blas));

    float *logits = malloc((size_t)max_b * c->vocab * sizeof(float));
    if (!logits)
        s_die("logits buffer", PL_ERR_NOMEM);
    s_fill(ops, stage, c, 0, max_b, o.context_fill, max_tokens, logits);
    printf("| decode (context %d) | tok/s | ms/step | weight GB/s | of copy | of read |\n"
           "|---|---|---|---|---|---|\n",
           o.context_fill);
    for (int i = 0; i < o.n_batches; i++) {
        for (int g = 1; g >= 0; g--) {
            if (!g && o.batches[i] != 1)
                continue; /* eager only for batch 1, to show what the graph saves */
            bool saved = stage->use_graphs;
            stage->use_graphs = g && saved;
            double step_s,
                tps = s_decode(ops, stage, o.batches[i], o.context_fill, o.steps, logits, &step_s);
            stage->use_graphs = saved;
            /* every step reads all weights once (the embedding row read is negligible) */
            double gbps = wbytes / step_s / 1e9;
            printf("| batch %d%s | %.1f | %.3f | %.0f | %.0f%% | %.0f%% |\n", o.batches[i],
                   g && saved ? " (graph)" : " (eager)", tps, step_s * 1e3, gbps,
                   100.0 * gbps / copy_gbps, 100.0 * gbps / read_gbps);
        }
    }
    printf("\n(copy counts bytes read plus written; weight GB/s counts bytes read.)\n\n");

    /* prefill: one long prompt, then four at once */
    printf("| prefill | tokens | tok/s | ms | GEMM TFLOP/s (model) |\n|---|---|---|---|---|\n");
    for (int n_seq = 1; n_seq <= 4; n_seq *= 4) {
        if (n_seq > max_b)
            break;
        /* the first forward of a shape includes cuBLAS's first-call setup: time the second */
        s_fill(ops, stage, c, 0, n_seq, o.prompt, n_seq * o.prompt, logits);
        double t1 = pl_now();
        s_fill(ops, stage, c, 0, n_seq, o.prompt, n_seq * o.prompt, logits);
        double t = pl_now() - t1;
        double flop = 2.0 * (double)s_matrix_params(c) * n_seq * o.prompt +
                      2.0 * n_seq * (double)c->vocab * c->hidden;
        printf("| %d x %d | %d | %.0f | %.1f | %.1f |\n", n_seq, o.prompt, n_seq * o.prompt,
               n_seq * o.prompt / t, t * 1e3, flop / t / 1e12);
    }
    printf("\n");
    if (stage->n_layers > 0) {
        double gemm_s = s_gemm_shapes(stage, o.prompt, peak);
        printf("GEMMs alone take %.1f ms of a %d-token prefill's layers.\n", gemm_s * 1e3,
               o.prompt);
    }

    free(logits);
    ops->stage_unload(stage);
    pl_model_destroy(&model);
    cudaStreamDestroy(s);
    ops->close(dev);
    return 0;
}
