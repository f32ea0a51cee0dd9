/* bench_decode: one CPU stage holding every layer. Decode at batch 1, 4 and 8 on 1 and 2 threads
 * as weight bytes streamed per second beside the machine's best read bandwidth, and a 512-token
 * prefill beside OpenBLAS sgemm on the same shapes; any weight type as stored (quantized: GGUF). */
#include "bench/bench_model.h"
#include "bench/bench_parts.h"
#include "bench/bench_ref.h"

#include "backends/backend.h"
#include "backends/cpu/cpu_blas_core.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_wcopy.h"
#include "common/util.h"
#include "model/model.h"

#include <getopt.h>
#include <stddef.h>
#include <sys/utsname.h>
#include <time.h>

#define S_MAX_BATCH 8

typedef struct {
    int threads[S_MAX_TLIST], n_threads, steps, prefill, reps;
    int ctx; /* > 0: batch-1 decode from this position (a prefill of it first) */
    const char *model; /* "small", "1b" or a directory */
    const char *dtype;
    int isa; /* -1: the machine's best */
} s_opts_t;

/* ---- the stage under test ---- */

typedef struct {
    pl_be_device_t *dev;
    pl_be_stage_t *stage;
    pl_model_config_t cfg;
    int32_t *ids;
    float *out;
} s_bench_t;

/* One step: n_seq sequences in slots 0.. with n_tok tokens each from position pos0. */
static pl_status_t s_forward(s_bench_t *b, int n_seq, int pos0, int n_tok)
{
    int slot[S_MAX_BATCH], p0[S_MAX_BATCH], nt[S_MAX_BATCH];
    for (int i = 0; i < n_seq; i++)
        slot[i] = i, p0[i] = pos0, nt[i] = n_tok;
    pl_be_batch_t batch = {
        .n_seq = n_seq, .n_tokens = n_seq * n_tok, .slot = slot, .pos0 = p0, .n_tok = nt};
    for (int i = 0; i < n_seq * n_tok; i++)
        b->ids[i] = (int32_t)(pl_rand_u64(7, (uint64_t)(pos0 * 131 + i)) % (uint64_t)b->cfg.vocab);
    return pl_be_stage_forward(b->stage, &batch, b->ids, b->out);
}

/* Rounds of steps at most in one cell of a --ctx run: every round goes on from where the last
 * stopped (a prefill of ctx tokens is not repeated), so the cache holds this many rounds more. */
#define S_CTX_ROUNDS 64
/* Repetitions of the decode parts (microseconds each), best kept: enough that one of them runs
 * unpreempted on a shared machine. */
#define S_PART_REPS 30

/* `batch` sequences: one token each, then `steps` timed steps, per round. */
static pl_status_t s_bench_decode(s_bench_t *b, const s_opts_t *o, const s_ref_t *ref, int ti,
                                  int batch, int threads, s_cell_t *c_p)
{
    s_cell_t c = {1e30, 1e30, 1e30, 1e30, 0, 0, 0, 0, 0};
    double start = pl_now();
    int pos = 0, timed = 0;
    pl_status_t st;
    for (int r = 0; r <= o->reps || (pl_now() - start < S_WARM_S && r < S_CTX_ROUNDS - 1); r++) {
        double rw, rc;
        if (ref->src) {
            s_ref_once(ref, ref->kind[ti], threads, &rw, &rc);
            c.ref_s = PL_MIN(c.ref_s, rw);
            c.ref_cpu = PL_MIN(c.ref_cpu, rc);
        }
        if (o->ctx == 0 || r == 0) {
            for (int i = 0; i < batch; i++)
                pl_be_stage_free_seq(b->stage, i);
            pos = PL_MAX(o->ctx, 1);
            if ((st = s_forward(b, batch, 0, pos)))
                return st;
        }
        pl_cpu_pool_stats_t p0, p1;
        pl_cpu_pool_stats(&p0);
        double t0 = pl_now(), c0 = s_proc_cpu_now();
        for (int i = 0; i < o->steps; i++)
            if ((st = s_forward(b, batch, pos++, 1)))
                return st;
        double el = pl_now() - t0, cpu = s_proc_cpu_now() - c0;
        pl_cpu_pool_stats(&p1);
        if (r > 0) {
            c.step_s = PL_MIN(c.step_s, el / o->steps);
            c.step_cpu = PL_MIN(c.step_cpu, cpu / o->steps / threads);
            c.jobs += (double)(p1.jobs - p0.jobs);
            c.wakes += (double)(p1.wakes - p0.wakes);
            c.waits += (double)(p1.waits - p0.waits);
            c.sleeps += (double)(p1.sleeps - p0.sleeps);
            c.wait_s += p1.wait_s - p0.wait_s;
            timed += o->steps;
        }
    }
    c.jobs /= timed, c.wakes /= timed, c.waits /= timed, c.sleeps /= timed, c.wait_s /= timed;
    *c_p = c;
    return PL_OK;
}

static pl_status_t s_bench_prefill(s_bench_t *b, const s_opts_t *o, int reps, double *s_p)
{
    double best = 1e30;
    pl_status_t st;
    for (int r = 0; r <= reps; r++) {
        pl_be_stage_free_seq(b->stage, 0);
        double t0 = pl_now();
        if ((st = s_forward(b, 1, 0, o->prefill)))
            return st;
        if (r > 0)
            best = PL_MIN(best, pl_now() - t0);
    }
    *s_p = best;
    return PL_OK;
}

/* Bytes one decode step reads from the weights as stored: every layer's tensors, the final norm
 * and the head (the embedding's few rows are left out). */
static double s_weight_bytes(pl_model_t *m, const pl_model_config_t *c)
{
    static const char *const names[] = {
        "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
        "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
        "self_attn.q_norm.weight", "self_attn.k_norm.weight"};
    pl_tensor_view_t v;
    char name[128];
    double bytes = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (size_t i = 0; i < PL_ARRAY_SIZE(names); i++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, names[i]);
            if (pl_model_tensor(m, name, &v) == PL_OK)
                bytes += (double)v.nbytes;
        }
    if (pl_model_tensor(m, "model.norm.weight", &v) == PL_OK)
        bytes += (double)v.nbytes;
    if (pl_model_tensor(m, "lm_head.weight", &v) == PL_OK ||
        pl_model_tensor(m, "model.embed_tokens.weight", &v) == PL_OK)
        bytes += (double)v.nbytes;
    return bytes;
}

/* FLOPs of a prefill of T tokens in one sequence: matrix products, causal attention and the
 * head on the last token. */
static double s_prefill_flops(const pl_model_config_t *c, int T)
{
    double h = c->hidden, q = (double)c->n_heads * c->head_dim,
           kv = (double)c->n_kv_heads * c->head_dim, in = c->intermediate;
    double mm = 2.0 * (h * q * 2 + h * kv * 2 + h * in * 3) * T;
    double att = 4.0 * c->head_dim * c->n_heads * ((double)T * (T + 1) / 2);
    return (mm + att) * c->n_layers + 2.0 * (double)c->vocab * h;
}

/* The same prefill's matrix products (all layers) timed one shape at a time through plain
 * cblas_sgemm: what the stage would reach if its GEMMs were all it did. */
static double s_prefill_sgemm_ideal(const pl_model_config_t *c, int T, int reps, double *flops_p)
{
    int h = c->hidden, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim,
        in = c->intermediate;
    struct {
        int n, k, count;
    } shapes[] = {{q, h, 1}, {kv, h, 2}, {h, q, 1}, {in, h, 2}, {h, in, 1}};
    double t = 0, f = 0;
    for (size_t i = 0; i < PL_ARRAY_SIZE(shapes); i++) {
        double s = s_sgemm_time(T, shapes[i].n, shapes[i].k, reps);
        if (s < 0)
            return -1;
        t += s * shapes[i].count;
        f += 2.0 * T * shapes[i].n * shapes[i].k * shapes[i].count;
    }
    *flops_p = f * c->n_layers;
    return t * c->n_layers;
}

/* GB/s of the decode kernel alone: batch-1 products over a pool of distinct [n][k] matrices of
 * type t totalling `bytes` (nothing stays cached), on `threads` threads, the matrices copied
 * into huge pages as a stage copies its weights (pl_cpu_wcopy_make). -1: out of memory. */
static double s_kernel_gbps(pl_wtype_t t, int threads, int n, int k, double bytes, int reps,
                            double *cpu_gbps_p)
{
    pl_cpu_pool_t *pool = NULL;
    size_t rb = 0, mat;
    size_t count;
    unsigned char *w = NULL;
    pl_cpu_wmat_t *mats = NULL, **mp = NULL;
    pl_cpu_wcopy_t copy = {0};
    float *x = malloc((size_t)k * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    double best = 1e30, best_cpu = 1e30, start;
    int row0 = 0;

    *cpu_gbps_p = -1.0;
    if (pl_wtype_row_bytes(t, k, &rb) || !x || !y || pl_cpu_pool_create(threads, &pool)) {
        best = -1.0;
        goto out;
    }
    mat = rb * (size_t)n;
    count = (size_t)(bytes / (double)mat) + 1; /* one pass over the pool per rep */
    if (!(w = malloc(count * mat))) {
        best = -1.0;
        goto out;
    }
    /* normal values (denormal weights would time the CPU's microcode assists instead), one row
     * as type t copied over the rest: the values do not matter to the speed */
    for (int i = 0; i < k; i++)
        x[i] = 0.01f * (float)(i % 97) - 0.4f;
    pl_wtype_from_f32(t, x, (size_t)k, w);
    for (size_t r = 1; r < count * (size_t)n; r++)
        memcpy(w + r * rb, w, rb);
    for (int i = 0; i < k; i++)
        x[i] = pl_rand_uniform(3, (uint64_t)i) - 0.5f;
    mats = calloc(count, sizeof(*mats));
    mp = calloc(count, sizeof(*mp));
    if (!mats || !mp) {
        best = -1.0;
        goto out;
    }
    for (size_t m = 0; m < count; m++) {
        mats[m] = (pl_cpu_wmat_t){
            .type = t, .rows = n, .cols = k, .row_bytes = rb, .data = w + m * mat};
        mp[m] = &mats[m];
    }
    if (pl_cpu_wcopy_make(mp, (int)count, pl_cpu_wcopy_pack_wanted(), &copy)) {
        best = -1.0;
        goto out;
    }
    free(w); /* the matrices now point into the copy */
    w = NULL;
    start = pl_now();
    for (int timed = 0; timed < reps;) {
        double t0 = pl_now(), c0 = s_proc_cpu_now();
        for (size_t m = 0; m < count; m++)
            pl_cpu_gemm_rows(pool, x, &row0, 1, &mats[m], y);
        double el = pl_now() - t0, cpu = (s_proc_cpu_now() - c0) / threads;
        if (t0 - start >= S_WARM_S && ++timed) {
            best = PL_MIN(best, el);
            best_cpu = PL_MIN(best_cpu, cpu);
        }
    }
    best = (double)(count * mat) / best / 1e9;
    *cpu_gbps_p = (double)(count * mat) / best_cpu / 1e9;
out:
    pl_cpu_pool_destroy(&pool);
    pl_cpu_wcopy_free(&copy);
    free(mats);
    free(mp);
    free(w);
    free(x);
    free(y);
    return best;
}

static void s_empty_chunk(void *arg, int c)
{
    __atomic_fetch_add((int *)arg, c, __ATOMIC_RELAXED);
}

/* Microseconds per pool job with nothing to do (a chunk per thread), jobs back to back as a
 * decode step runs them: the dispatch and join a step pays per job. Best of 5 rounds of 2,000. */
static double s_job_us(int threads)
{
    pl_cpu_pool_t *pool = NULL;
    int sink = 0;
    double best = 1e30;
    if (pl_cpu_pool_create(threads, &pool))
        return -1;
    for (int r = 0; r < 6; r++) {
        double t0 = pl_now();
        for (int i = 0; i < 2000; i++)
            pl_cpu_pool_chunks(pool, threads, s_empty_chunk, &sink);
        if (r > 0)
            best = PL_MIN(best, (pl_now() - t0) / 2000 * 1e6);
    }
    pl_cpu_pool_destroy(&pool);
    return best;
}

static void s_machine(void)
{
    char name[128] = "unknown", line[256], date[64];
    struct utsname u;
    FILE *f = fopen("/proc/cpuinfo", "r");
    double load[3] = {0};
    time_t now = time(NULL);

    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(name, sizeof(name), "%s", strchr(line, ':') + 2);
            name[strcspn(name, "\n")] = '\0';
            break;
        }
    if (f)
        fclose(f);
    uname(&u);
    getloadavg(load, 3);
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M %Z", localtime(&now));
    printf("machine: %s, %ld online cores, last-level cache %zu MB, %s %s; %s\n", name,
           sysconf(_SC_NPROCESSORS_ONLN), s_llc_bytes() >> 20, u.sysname, u.release, date);
    printf("OpenBLAS %s; kernels: %s; load average before the run %.2f %.2f %.2f\n",
           openblas_get_config(), pl_cpu_isa_name(pl_cpu_isa()), load[0], load[1], load[2]);
    const char *env = getenv(PL_CPU_BLAS_CORE_ENV), *own = pl_cpu_blas_core_own();
    printf("OpenBLAS core: %s (%s%s%s; the core OpenBLAS picks by itself here: %s)\n\n",
           openblas_get_corename(), PL_CPU_BLAS_CORE_ENV, env ? "=" : " ", env ? env : "unset",
           own ? own : "unknown, the variable was set from outside");
}

static int s_usage(FILE *f, int rc)
{
    fprintf(f,
            "usage: bench_decode [--model small|1b|DIR|FILE.gguf] [--dtype TYPE] [--threads 1,2]\n"
            "                    [--steps N] [--prefill N] [--reps N] [--ctx N]\n"
            "                    [--isa scalar|avx2|avx512]\n"
            "  --model     small: hidden 768, 12 layers (default); 1b: 1.1 G parameters (both\n"
            "              made with pl-mkmodel in a temporary directory); or a model directory\n"
            "  --dtype     weight type of a made model: f32 (default), f16, bf16 as safetensors;\n"
            "              q8_0, q4_0, q4_k, q5_k, q6_k as GGUF (norms in f32)\n"
            "  --threads   thread counts to decode with (default 1,2); prefill uses the last\n"
            "  --steps N   timed decode steps (default 32); --prefill N tokens (default 512,\n"
            "              0 skips it); --reps N repetitions, the best is kept (default 5)\n"
            "  --ctx N     decode at batch 1 only, from position N (a prefill of N tokens\n"
            "              first): attention's share at a long context (default 0)\n"
            "  --isa       cap the kernels' instruction set\n");
    return rc;
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"dtype", required_argument, NULL, 'd'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"steps", required_argument, NULL, 's'},
                                         {"prefill", required_argument, NULL, 'p'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"isa", required_argument, NULL, 'i'},
                                         {"ctx", required_argument, NULL, 'c'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    char *save, *tok, buf[64];
    *o = (s_opts_t){.threads = {1, 2},
                    .n_threads = 2,
                    .steps = 32,
                    .prefill = 512,
                    .reps = 5,
                    .model = "small",
                    .dtype = "f32",
                    .isa = -1};
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'd':
            o->dtype = optarg;
            break;
        case 's':
            o->steps = atoi(optarg);
            break;
        case 'p':
            o->prefill = atoi(optarg);
            break;
        case 'r':
            o->reps = atoi(optarg);
            break;
        case 'c':
            o->ctx = atoi(optarg);
            break;
        case 'i':
            for (o->isa = 0; o->isa < PL_CPU_ISA_COUNT; o->isa++)
                if (!strcmp(optarg, pl_cpu_isa_name((pl_cpu_isa_t)o->isa)))
                    break;
            if (o->isa == PL_CPU_ISA_COUNT)
                return -1;
            break;
        case 't':
            snprintf(buf, sizeof(buf), "%s", optarg);
            o->n_threads = 0;
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (o->n_threads == S_MAX_TLIST || atoi(tok) < 1 || atoi(tok) > S_MAX_THREADS)
                    return -1;
                o->threads[o->n_threads++] = atoi(tok);
            }
            break;
        case 'h':
            exit(s_usage(stdout, 0));
        default:
            return -1;
        }
    }
    pl_wtype_t wt;
    if (optind != argc || o->n_threads < 1 || o->steps < 1 || o->prefill < 0 || o->reps < 1 ||
        o->ctx < 0 || o->reps + 1 >= S_CTX_ROUNDS ||
        pl_wtype_parse(o->dtype, &wt) != PL_OK)
        return -1;
    return 0;
}

/* The best read bandwidth per thread count over every read kind, printed as a table: in wall
 * time (best) and in CPU time per thread (best_cpu), which a loaded machine distorts less. */
static void s_read_refs(const s_opts_t *o, double wbytes, double *best, double *best_cpu,
                        s_ref_t *ref)
{
    size_t bytes = PL_MAX((size_t)1 << 30, 4 * s_llc_bytes()), words = bytes / 8;
    uint64_t *src = malloc(bytes);
    double gbps[S_READ_COUNT][S_MAX_TLIST] = {{0}};

    *ref = (s_ref_t){.src = src, .bytes = bytes};
    for (int t = 0; t < o->n_threads; t++)
        best[t] = best_cpu[t] = -1;
    if (!src) {
        printf("(no memory for the %zu MB read buffer)\n\n", bytes >> 20);
        return;
    }
    for (size_t i = 0; i < words; i++)
        src[i] = i;
    printf("| read bandwidth, %zu MB buffer (%.1fx the last-level cache; the model streams %.0f MB "
           "per token) |",
           bytes >> 20, (double)bytes / (double)PL_MAX(s_llc_bytes(), 1), wbytes / 1e6);
    for (int t = 0; t < o->n_threads; t++)
        printf(" %d thread(s) |", o->threads[t]);
    printf("\n| --- |");
    for (int t = 0; t < o->n_threads; t++)
        printf(" ---: |");
    printf("\n");
    for (int k = 0; k < S_READ_COUNT; k++) {
        if (!s_read_supported((s_read_kind_t)k))
            continue;
        printf("| %s |", s_read_names[k]);
        for (int t = 0; t < o->n_threads; t++) {
            double s = s_read_time((s_read_kind_t)k, src, words, o->threads[t], o->reps, S_WARM_S);
            gbps[k][t] = (double)bytes / s / 1e9;
            best[t] = PL_MAX(best[t], gbps[k][t]);
            double cpu = 1e30;
            for (int r = 0; r < o->reps; r++) {
                double c0 = s_proc_cpu_now();
                s_read_time((s_read_kind_t)k, src, words, o->threads[t], 1, 0);
                cpu = PL_MIN(cpu, (s_proc_cpu_now() - c0) / o->threads[t]);
            }
            if ((double)bytes / cpu / 1e9 > best_cpu[t]) /* the kind timed beside the stage */
                ref->kind[t] = (s_read_kind_t)k;
            best_cpu[t] = PL_MAX(best_cpu[t], (double)bytes / cpu / 1e9);
            printf(" %.2f GB/s (CPU time: %.2f) |", gbps[k][t], (double)bytes / cpu / 1e9);
        }
        printf("\n");
    }
    printf("| **best (the reference below)** |");
    for (int t = 0; t < o->n_threads; t++)
        printf(" **%.2f GB/s (CPU time: %.2f)** |", best[t], best_cpu[t]);
    printf("\n\n");
}

typedef struct {
    s_cell_t cell[S_MAX_TLIST][3]; /* batch 1, 4, 8 */
    double kernel_gbps[S_MAX_TLIST], kernel_cpu_gbps[S_MAX_TLIST];
    double pf_s, ideal_s, ideal_flops;
    s_parts_t parts;
    s_dparts_t dparts[S_MAX_TLIST];
} s_res_t;

static const int s_batches[3] = {1, 4, 8};

/* Decode (every thread count) and prefill (the last) through one stage with every layer. */
static pl_status_t s_run_stage(pl_model_t *model, const s_opts_t *o, const s_ref_t *ref,
                               s_res_t *r)
{
    s_bench_t b = {0};
    pl_status_t st = PL_OK;
    b.cfg = *pl_model_config(model);
    pl_be_stage_params_t sp = {.first_layer = 0,
                               .last_layer = b.cfg.n_layers - 1,
                               .has_embed = true,
                               .has_head = true,
                               .max_seqs = S_MAX_BATCH,
                               .max_ctx = PL_MAX(o->prefill, o->steps + 2),
                               .max_tokens = PL_MAX(PL_MAX(o->prefill, o->ctx), S_MAX_BATCH)};
    if (o->ctx > 0)
        sp.max_ctx = PL_MAX(sp.max_ctx, o->ctx + S_CTX_ROUNDS * o->steps + 1);
    if (sp.max_ctx > b.cfg.max_pos)
        return pl_error(PL_ERR_RANGE, "--prefill / --steps need %d positions, the model has %d",
                        sp.max_ctx, b.cfg.max_pos);
    b.ids = malloc((size_t)sp.max_tokens * sizeof(int32_t));
    b.out = malloc((size_t)S_MAX_BATCH * b.cfg.vocab * sizeof(float));
    if (!b.ids || !b.out)
        st = pl_error(PL_ERR_NOMEM, "bench buffers");
    for (int t = 0; t < o->n_threads && !st; t++) {
        if ((st = pl_be_device_open(pl_be_cpu(), 0, o->threads[t], &b.dev)) ||
            (st = pl_be_stage_load(b.dev, model, &sp, &b.stage))) {
            pl_be_device_close(&b.dev);
            break;
        }
        for (int i = 0; i < (o->ctx > 0 ? 1 : 3) && !st; i++)
            st = s_bench_decode(&b, o, ref, t, s_batches[i], o->threads[t], &r->cell[t][i]);
        if (!st && t == o->n_threads - 1 && o->prefill > 0)
            st = s_bench_prefill(&b, o, PL_MAX(1, o->reps / 2), &r->pf_s);
        pl_be_stage_unload(&b.stage);
        pl_be_device_close(&b.dev);
    }
    free(b.ids);
    free(b.out);
    return st;
}

static void s_print(const pl_model_config_t *c, const s_opts_t *o, const s_res_t *r, double wbytes,
                    double ref_bytes, const double *best, const double *best_cpu, const char *wt)
{
    printf("| decode, %s weights | threads | batch | ms per step | tok/s | weight bytes streamed | "
           "read reference in the same rounds | ratio | in CPU time per thread: ms per step, GB/s, "
           "read reference, ratio |\n",
           wt);
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int n_batches = o->ctx > 0 ? 1 : 3;
    for (int t = 0; t < o->n_threads; t++)
        for (int i = 0; i < n_batches; i++) {
            const s_cell_t *cl = &r->cell[t][i];
            double gbps = wbytes / cl->step_s / 1e9, gc = wbytes / cl->step_cpu / 1e9;
            double rg = ref_bytes / cl->ref_s / 1e9, rgc = ref_bytes / cl->ref_cpu / 1e9;
            printf("| %s | %d | %d | %.2f | %.1f | %.2f GB/s | %.2f GB/s | %.0f%% | %.2f ms, %.2f "
                   "GB/s, %.2f GB/s, %.0f%% |\n",
                   i == 0 ? "the stage" : "", o->threads[t], s_batches[i], cl->step_s * 1e3,
                   s_batches[i] / cl->step_s, gbps, rg, 100.0 * gbps / rg, cl->step_cpu * 1e3, gc,
                   rgc, 100.0 * gc / rgc);
        }
    for (int t = 0; t < o->n_threads; t++)
        if (r->kernel_gbps[t] > 0)
            printf("| the decode kernel alone (batch-1 products %dx%d) | %d | 1 | | | %.2f GB/s | "
                   "%.2f GB/s | %.0f%% | %.2f GB/s, %.2f GB/s, %.0f%% |\n",
                   c->intermediate, c->hidden, o->threads[t], r->kernel_gbps[t], best[t],
                   100.0 * r->kernel_gbps[t] / best[t], r->kernel_cpu_gbps[t], best_cpu[t],
                   100.0 * r->kernel_cpu_gbps[t] / best_cpu[t]);
    if (n_batches == 3) {
        printf("\n| batched decode, %s weights | threads | batch 4 cost | batch 8 cost |\n"
               "| --- | ---: | ---: | ---: |\n",
               wt);
        for (int t = 0; t < o->n_threads; t++) /* a step's time over batch 1's, in the same run */
            printf("| x one row's step | %d | %.2fx | %.2fx |\n", o->threads[t],
                   r->cell[t][1].step_s / r->cell[t][0].step_s,
                   r->cell[t][2].step_s / r->cell[t][0].step_s);
    }
    printf("\n");
    s_cell_t b1[S_MAX_TLIST];
    for (int t = 0; t < o->n_threads; t++)
        b1[t] = r->cell[t][0];
    s_print_parts(c, o->ctx > 0 ? o->ctx : o->steps / 2 + 1, o->n_threads, o->threads, r->dparts,
                  b1);
    /* q/k/v one job, o one, gate/up one, down one; the head one */
    int jobs = 4 * c->n_layers + 1;
    printf("| pool jobs per decode step | threads | one empty job, back to back | all of a step's "
           "jobs | share of the batch-1 step (wall) |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (int t = 0; t < o->n_threads; t++) {
        double us = s_job_us(o->threads[t]);
        printf("| %d | %d | %.2f us | %.3f ms | %.1f%% |\n", jobs, o->threads[t], us,
               us * jobs / 1e3, 100.0 * us * jobs / 1e6 / r->cell[t][0].step_s);
    }
    printf("\n");
    if (o->prefill > 0 && r->pf_s > 0) {
        double flops = s_prefill_flops(c, o->prefill), T = o->prefill;
        int th = o->threads[o->n_threads - 1];
        printf("| prefill, %d tokens, %d thread(s) | ours | OpenBLAS sgemm (core %s) on the same "
               "shapes | ratio |\n| --- | ---: | ---: | ---: |\n",
               o->prefill, th, openblas_get_corename());
        printf("| %s weights | %.1f GFLOP/s (%.0f tok/s, %.0f ms) | %.1f GFLOP/s (matrix products "
               "only: %.0f ms) | %.0f%% |\n\n",
               wt, flops / r->pf_s / 1e9, T / r->pf_s, r->pf_s * 1e3,
               r->ideal_flops / r->ideal_s / 1e9, r->ideal_s * 1e3,
               100.0 * (flops / r->pf_s) / (r->ideal_flops / r->ideal_s));
        double rest = r->pf_s - r->ideal_s - r->parts.att_s - r->parts.swiglu_s - r->parts.norm_s -
                      r->parts.rope_s;
        printf("| where the prefill's %.0f ms go | ms | share |\n| --- | ---: | ---: |\n",
               r->pf_s * 1e3);
        printf("| matrix products, timed as plain sgemm on the same shapes (the stage uses %s) | "
               "%.0f | %.0f%% |\n",
               pl_cpu_gemm_seq_uses_blas() ? "OpenBLAS" : "its own kernel", r->ideal_s * 1e3,
               100 * r->ideal_s / r->pf_s);
        printf("| attention (pl_cpu_attention_seq, on the pool) | %.0f | %.0f%% |\n",
               r->parts.att_s * 1e3, 100 * r->parts.att_s / r->pf_s);
        printf("| swiglu, rmsnorm, rope (one thread) | %.0f | %.0f%% |\n",
               (r->parts.swiglu_s + r->parts.norm_s + r->parts.rope_s) * 1e3,
               100 * (r->parts.swiglu_s + r->parts.norm_s + r->parts.rope_s) / r->pf_s);
        printf("| the rest (head, adds, copies; below zero when the parts ran under more load, "
               "or the stage's GEMMs beat sgemm) | %.0f | %.0f%% |\n\n",
               rest * 1e3, 100 * rest / r->pf_s);
    }
}

int main(int argc, char **argv)
{
    s_opts_t o;
    char tmp[] = "/tmp/pl-bench-decode-XXXXXX", gguf[sizeof(tmp) + 16];
    const char *dir;
    bool made = false;
    pl_model_t *model = NULL;
    s_res_t r = {0};
    s_ref_t ref = {0};
    double best[S_MAX_TLIST], best_cpu[S_MAX_TLIST], m0, self0, m1, self1, t0;
    pl_tensor_view_t v;
    int rc = 1;

    /* a fair sgemm reference, and the stage's prefill as a daemon runs it: the best core type
     * this CPU supports where OpenBLAS picked generic kernels (its own pick is kept in the
     * restart's marker, pl_cpu_blas_core_own) */
    pl_cpu_blas_core_fix(argv);
    if (s_parse(argc, argv, &o))
        return s_usage(stderr, 2);
    if (o.isa >= 0)
        pl_cpu_isa_cap((pl_cpu_isa_t)o.isa);
    dir = o.model;
    if (!strcmp(o.model, "small") || !strcmp(o.model, "1b")) {
        if (!mkdtemp(tmp) || s_run_mkmodel(tmp, o.model, o.dtype)) {
            fprintf(stderr, "bench_decode: could not make a model in %s\n", tmp);
            s_rmdir(tmp);
            return 1;
        }
        dir = tmp;
        made = true;
        if (s_quant_dtype(o.dtype)) {
            snprintf(gguf, sizeof(gguf), "%s/model.gguf", tmp);
            dir = gguf;
        }
    }
    if (pl_model_open(dir, &model) ||
        pl_model_tensor(model, "model.layers.0.self_attn.q_proj.weight", &v))
        goto err;
    const pl_model_config_t *c = pl_model_config(model);
    double wbytes = s_weight_bytes(model, c);
    s_machine();
    printf("model: %s (%s): %s, %d layers, hidden %d, intermediate %d, heads %d/%d, vocab %d, "
           "%s weights, %.1f MB as stored\n\n",
           o.model, dir, pl_model_family_name(c->family), c->n_layers, c->hidden, c->intermediate,
           c->n_heads, c->n_kv_heads, c->vocab, pl_wtype_name(v.wtype),
           pl_model_weight_bytes(model) / 1e6);
    fflush(stdout);
    t0 = pl_now();
    s_cpu_times(&m0, &self0);
    s_read_refs(&o, wbytes, best, best_cpu, &ref);
    fflush(stdout);
    if (s_run_stage(model, &o, &ref, &r))
        goto err;
    for (int t = 0; t < o.n_threads; t++) {
        pl_cpu_pool_t *pool = NULL;
        const pl_cpu_wkernel_t *k = pl_cpu_wkernel(v.wtype);
        size_t xb = k && k->x_bytes ? k->x_bytes(c->hidden) : 0;
        if (pl_cpu_pool_create(o.threads[t], &pool) ||
            s_decode_parts(c, o.ctx > 0 ? o.ctx : o.steps / 2 + 1, pool, xb, S_PART_REPS,
                           &r.dparts[t])) {
            pl_cpu_pool_destroy(&pool);
            goto err;
        }
        pl_cpu_pool_destroy(&pool);
    }
    for (int t = 0; t < o.n_threads; t++)
        r.kernel_gbps[t] = s_kernel_gbps(v.wtype, o.threads[t], c->intermediate, c->hidden,
                                         PL_MAX(1073741824.0, 4.0 * (double)s_llc_bytes()), o.reps,
                                         &r.kernel_cpu_gbps[t]);
    if (o.prefill > 0) {
        openblas_set_num_threads(o.threads[o.n_threads - 1]);
        r.ideal_s = s_prefill_sgemm_ideal(c, o.prefill, o.reps, &r.ideal_flops);
        openblas_set_num_threads(1); /* as a stage runs the parts: pool threads, one BLAS each */
        pl_cpu_pool_t *pool = NULL;
        if (pl_cpu_pool_create(o.threads[o.n_threads - 1], &pool))
            goto err;
        pl_status_t pst = s_prefill_parts(c, o.prefill, PL_MAX(1, o.reps / 2), pool, &r.parts);
        pl_cpu_pool_destroy(&pool);
        if (pst)
            goto err;
    }
    s_cpu_times(&m1, &self1);
    s_print(c, &o, &r, wbytes, (double)ref.bytes, best, best_cpu, pl_wtype_name(v.wtype));
    printf("other processes kept %.2f of %ld cores busy on average during the measurements "
           "(figures are comparable only when this is near 0)\n",
           PL_MAX(0.0, (m1 - m0) - (self1 - self0)) / (pl_now() - t0),
           sysconf(_SC_NPROCESSORS_ONLN));
    rc = 0;
err:
    if (rc)
        fprintf(stderr, "bench_decode: %s\n", pl_error_msg());
    free(ref.src);
    pl_model_destroy(&model);
    if (made)
        s_rmdir(tmp);
    return rc;
}
