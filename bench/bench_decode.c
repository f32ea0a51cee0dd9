/* bench_decode: one CPU stage holding every layer; decode at batch 1 as weight bytes streamed per
 * second beside this machine's memory read bandwidth, and batched prefill beside OpenBLAS sgemm. */
#include "backends/backend.h"
#include "backends/cpu/cpu_ops.h"
#include "common/util.h"
#include "model/model.h"

#include <cblas.h>
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_THREADS 64
/* Untimed runs first: OpenBLAS's threads, and a second core woken from idle, can run at half
 * speed for the first few tenths of a second. */
#define S_WARM_S 0.5

typedef struct {
    int threads, steps, prefill, reps;
    const char *model_dir;
} s_opts_t;

/* ---- the machine's own references: read and copy bandwidth, sgemm ---- */

typedef struct {
    const uint64_t *src;
    uint64_t *dst;
    size_t n; /* words */
    uint64_t sum;
} s_mem_job_t;

/* A plain sum: integer adds are associative, so the compiler vectorises the loop freely.
 * Always inlined so that the AVX2 copy below is compiled with 256-bit loads. */
static inline __attribute__((always_inline)) uint64_t s_sum(const uint64_t *p, size_t n)
{
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += p[i + j];
    for (; i < n; i++)
        a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The same loop with 256-bit loads: one core reaches ~25% more bandwidth with them here. */
__attribute__((target("avx2"))) static uint64_t s_sum_avx2(const uint64_t *p, size_t n)
{
    return s_sum(p, n);
}
#endif

static void *s_sum_thread(void *arg)
{
    s_mem_job_t *j = arg;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2")) {
        j->sum = s_sum_avx2(j->src, j->n);
        return NULL;
    }
#endif
    j->sum = s_sum(j->src, j->n);
    return NULL;
}

static void *s_copy_thread(void *arg)
{
    s_mem_job_t *j = arg;
    memcpy(j->dst, j->src, j->n * sizeof(uint64_t));
    return NULL;
}

/* Best time over reps of `fn` run by `threads` threads over n words split evenly, after
 * warm_s seconds of untimed runs. */
static double s_mem_time(void *(*fn)(void *), const uint64_t *src, uint64_t *dst, size_t n,
                         int threads, int reps, double warm_s)
{
    s_mem_job_t jobs[S_MAX_THREADS];
    pthread_t tids[S_MAX_THREADS];
    bool started[S_MAX_THREADS];
    volatile uint64_t sink = 0;
    double best = 1e30, start = pl_now();

    for (int timed = 0; timed < reps;) {
        double t0 = pl_now();
        for (int i = 0; i < threads; i++) {
            size_t lo = n / threads * i, hi = i == threads - 1 ? n : n / threads * (i + 1);
            jobs[i] = (s_mem_job_t){.src = src + lo, .dst = dst ? dst + lo : NULL, .n = hi - lo};
            started[i] = i > 0 && pthread_create(&tids[i], NULL, fn, &jobs[i]) == 0;
        }
        for (int i = 0; i < threads; i++) /* job 0, and any whose thread did not start */
            if (!started[i])
                fn(&jobs[i]);
        for (int i = 1; i < threads; i++)
            if (started[i])
                pthread_join(tids[i], NULL);
        double t = pl_now() - t0;
        for (int i = 0; i < threads; i++)
            sink += jobs[i].sum;
        if (t0 - start >= warm_s && ++timed)
            best = PL_MIN(best, t);
    }
    (void)sink;
    return best;
}

/* Seconds of one cblas_sgemm y[m][n] = x[m][k] @ w[n][k]^T (the backend's layout), best of reps. */
static double s_sgemm_time(int m, int n, int k, int reps)
{
    float *x = malloc((size_t)m * k * sizeof(float)), *w = malloc((size_t)n * k * sizeof(float));
    float *y = malloc((size_t)m * n * sizeof(float));
    double best = -1.0;

    if (x && w && y) {
        for (size_t i = 0; i < (size_t)m * k; i++)
            x[i] = pl_rand_uniform(1, i) - 0.5f;
        for (size_t i = 0; i < (size_t)n * k; i++)
            w[i] = pl_rand_uniform(2, i) - 0.5f;
        double start = pl_now();
        best = 1e30;
        for (int timed = 0; timed < reps;) {
            double t0 = pl_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f,
                        y, n);
            double t = pl_now() - t0;
            if (t0 - start >= S_WARM_S && ++timed)
                best = PL_MIN(best, t);
        }
    }
    free(x);
    free(w);
    free(y);
    return best;
}

typedef enum { S_VIA_ROWS, S_VIA_SGEMM, S_VIA_SGEMV } s_via_t;

/* GB/s of batch-1 products y[n] = w[n][k] @ x[k] streamed over a pool of distinct matrices
 * totalling `bytes` (so nothing stays in cache), through the backend's decode kernel
 * pl_cpu_matmul_rows on `threads` threads, sgemm with one row, or sgemv. Best of reps passes;
 * -1 when out of memory. */
static double s_stream_gbps(s_via_t via, int threads, int n, int k, double bytes, int reps)
{
    pl_cpu_pool_t *pool = NULL;
    int row0 = 0;
    size_t mat = (size_t)n * k, count = (size_t)(bytes / (mat * sizeof(float))) + 1;
    float *w = malloc(count * mat * sizeof(float)), *x = malloc((size_t)k * sizeof(float));
    float *y = malloc((size_t)n * sizeof(float));
    double best = 1e30;

    if (!w || !x || !y || (via == S_VIA_ROWS && pl_cpu_pool_create(threads, &pool))) {
        best = -1.0;
        goto out;
    }
    for (size_t i = 0; i < count * mat; i++)
        w[i] = (float)(i % 13) * 0.01f;
    for (int i = 0; i < k; i++)
        x[i] = pl_rand_uniform(3, (uint64_t)i) - 0.5f;
    double start = pl_now();
    for (int timed = 0; timed < reps;) {
        double t0 = pl_now();
        for (size_t m = 0; m < count; m++) {
            const float *wm = w + m * mat;
            if (via == S_VIA_ROWS)
                pl_cpu_matmul_rows(pool, x, &row0, 1, k, wm, n, y);
            else if (via == S_VIA_SGEMV)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, wm, k, x, 1, 0.0f, y, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, n, k, 1.0f, x, k, wm, k,
                            0.0f, y, n);
        }
        double t = pl_now() - t0;
        if (t0 - start >= S_WARM_S && ++timed)
            best = PL_MIN(best, t);
    }
    best = (double)(count * mat * sizeof(float)) / best / 1e9;
out:
    pl_cpu_pool_destroy(&pool);
    free(w);
    free(x);
    free(y);
    return best;
}

/* ---- the model: made here when none is given ---- */

static int s_run_mkmodel(const char *dir)
{
    char exe[PATH_MAX], bin[PATH_MAX], tool[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    pl_path_dirname(exe, bin, sizeof(bin));
    snprintf(tool, sizeof(tool), "%s/pl-mkmodel", bin);
    /* ~340 MB f32: far beyond any L3, so decode streams from memory */
    char *argv[] = {tool, "--out", (char *)dir, "--layers", "6", "--hidden", "1024",
                    "--intermediate", "2816", "--heads", "16", "--kv-heads", "8", "--vocab",
                    "8192", "--dtype", "f32", "--seed", "1", "--max-pos", "4096", NULL};
    fprintf(stderr, "bench_decode: making a model with %s\n", tool);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execv(tool, argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return 0;
}

static void s_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX];
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- the stage under test ---- */

typedef struct {
    pl_be_stage_t *stage;
    pl_model_config_t cfg;
    int32_t *ids;
    float *out;
} s_bench_t;

static pl_status_t s_forward(s_bench_t *b, int slot, int pos0, int n_tok)
{
    pl_be_batch_t batch = {.n_seq = 1, .n_tokens = n_tok, .slot = &slot, .pos0 = &pos0,
                           .n_tok = &n_tok};
    for (int i = 0; i < n_tok; i++)
        b->ids[i] = (int32_t)(pl_rand_u64(7, (uint64_t)(pos0 + i)) % (uint64_t)b->cfg.vocab);
    return pl_be_stage_forward(b->stage, &batch, b->ids, b->out);
}

/* Bytes one decode token streams: every layer's matrices and norms plus final norm and head,
 * as f32 (the CPU backend holds f32 whatever the file's dtype). */
static double s_weight_bytes(const pl_model_config_t *c)
{
    double h = c->hidden, q = (double)c->n_heads * c->head_dim,
           kv = (double)c->n_kv_heads * c->head_dim, in = c->intermediate;
    double layer = h * q * 2 + h * kv * 2 + h * in * 3 + 2 * h;
    return 4.0 * (layer * c->n_layers + (double)c->vocab * h + h);
}

/* FLOPs of a prefill of T tokens in one sequence: matrix products, causal attention (scores
 * and weighted sum over positions 0..p for each token p), and the head on the last token. */
static double s_prefill_flops(const pl_model_config_t *c, int T)
{
    double h = c->hidden, q = (double)c->n_heads * c->head_dim,
           kv = (double)c->n_kv_heads * c->head_dim, in = c->intermediate;
    double mm = 2.0 * (h * q * 2 + h * kv * 2 + h * in * 3) * T;
    double att = 4.0 * c->head_dim * c->n_heads * ((double)T * (T + 1) / 2);
    return (mm + att) * c->n_layers + 2.0 * (double)c->vocab * h;
}

/* The same prefill's matrix products timed one shape at a time through plain cblas_sgemm:
 * what the backend would reach if its GEMMs were all it did. */
static double s_prefill_sgemm_ideal(const pl_model_config_t *c, int T, int reps, double *flops_p)
{
    int h = c->hidden, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim,
        in = c->intermediate;
    struct {
        int n, k, count;
    } shapes[] = {{q, h, 1}, {kv, h, 2}, {h, q, 1}, {in, h, 2}, {h, in, 1}};
    double t = 0, f = 0;
    for (size_t i = 0; i < PL_ARRAY_SIZE(shapes); i++) {
        double s = s_sgemm_time(T, shapes[i].n, shapes[i].k, 3 * reps); /* cheap calls */
        if (s < 0)
            return -1;
        t += s * shapes[i].count;
        f += 2.0 * T * shapes[i].n * shapes[i].k * shapes[i].count;
    }
    *flops_p = f;
    return t;
}

/* Seconds of CPU time the whole machine spent busy (/proc/stat) and this process used. */
static void s_cpu_times(double *machine_p, double *self_p)
{
    unsigned long long v[8] = {0};
    struct rusage ru;
    FILE *f = fopen("/proc/stat", "r");
    if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                     &v[4], &v[5], &v[6], &v[7]) != 8)
        memset(v, 0, sizeof(v));
    if (f)
        fclose(f);
    *machine_p = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / sysconf(_SC_CLK_TCK);
    getrusage(RUSAGE_SELF, &ru);
    *self_p = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
              ru.ru_stime.tv_usec * 1e-6;
}

static void s_machine(int threads)
{
    char name[128] = "unknown", line[256];
    struct utsname u;
    FILE *f = fopen("/proc/cpuinfo", "r");
    double load[3] = {0};
    time_t now = time(NULL);
    char date[64];

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
    printf("machine: %s, %ld online cores, %s %s; %s\n", name, sysconf(_SC_NPROCESSORS_ONLN),
           u.sysname, u.release, date);
    printf("threads: %d (OpenBLAS %s); load average before the run %.2f %.2f %.2f\n\n", threads,
           openblas_get_config(), load[0], load[1], load[2]);
}

static int s_usage(FILE *f, int rc)
{
    fprintf(f, "usage: bench_decode [--threads N] [--steps N] [--prefill N] [--reps N] "
               "[MODEL_DIR]\n"
               "  MODEL_DIR    a Llama model (default: a ~340 MB f32 random model made with\n"
               "               pl-mkmodel from this binary's directory into a temporary dir)\n"
               "  --threads N  CPU threads for the stage and every reference (default: all)\n"
               "  --steps N    timed decode steps at batch 1 (default 32)\n"
               "  --prefill N  tokens in the prefill batch (default 512)\n"
               "  --reps N     repetitions; the best is reported (default 5)\n");
    return rc;
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    static const struct option opts[] = {{"threads", required_argument, NULL, 't'},
                                         {"steps", required_argument, NULL, 's'},
                                         {"prefill", required_argument, NULL, 'p'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    cpu_set_t set;
    int c;
    *o = (s_opts_t){.steps = 32, .prefill = 512, .reps = 5};
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        o->threads = CPU_COUNT(&set);
    o->threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    while ((c = getopt_long(argc, argv, "t:s:p:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 't': o->threads = atoi(optarg); break;
        case 's': o->steps = atoi(optarg); break;
        case 'p': o->prefill = atoi(optarg); break;
        case 'r': o->reps = atoi(optarg); break;
        case 'h': exit(s_usage(stdout, 0));
        default: return -1;
        }
    }
    if (optind + 1 < argc || o->threads < 1 || o->threads > S_MAX_THREADS || o->steps < 1 ||
        o->prefill < 1 || o->reps < 1)
        return -1;
    o->model_dir = optind < argc ? argv[optind] : NULL;
    return 0;
}

/* Decode: prefill one token, then time `steps` single-token steps; best of reps. */
static pl_status_t s_bench_decode(s_bench_t *b, const s_opts_t *o, double *s_per_tok_p)
{
    double best = 1e30;
    pl_status_t st;
    for (int r = 0; r <= o->reps; r++) { /* r == 0 faults the weights in and warms OpenBLAS */
        pl_be_stage_free_seq(b->stage, 1);
        if ((st = s_forward(b, 1, 0, 1)))
            return st;
        double t0 = pl_now();
        for (int i = 1; i <= o->steps; i++)
            if ((st = s_forward(b, 1, i, 1)))
                return st;
        if (r > 0)
            best = PL_MIN(best, (pl_now() - t0) / o->steps);
    }
    *s_per_tok_p = best;
    return PL_OK;
}

static pl_status_t s_bench_prefill(s_bench_t *b, const s_opts_t *o, double *s_p)
{
    double best = 1e30;
    pl_status_t st;
    for (int r = 0; r <= o->reps; r++) {
        pl_be_stage_free_seq(b->stage, 0);
        double t0 = pl_now();
        if ((st = s_forward(b, 0, 0, o->prefill)))
            return st;
        if (r > 0)
            best = PL_MIN(best, pl_now() - t0);
    }
    *s_p = best;
    return PL_OK;
}

/* Sum every f32 matrix of the model in place, through its own mapping: the decode's read
 * pattern (many page-cache-backed arrays) without any compute. -1 when not all are f32. */
static double s_mapped_read_gbps(pl_model_t *model, const pl_model_config_t *c, int reps)
{
    static const char *const names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                        "mlp.down_proj"};
    double best = 1e30, bytes = 0;
    char name[128];
    for (int r = 0; r <= reps; r++) { /* r == 0 warms up */
        double t = 0;
        bytes = 0;
        for (int l = 0; l < c->n_layers; l++) {
            for (size_t i = 0; i < PL_ARRAY_SIZE(names); i++) {
                pl_tensor_view_t v;
                snprintf(name, sizeof(name), "model.layers.%d.%s.weight", l, names[i]);
                if (pl_model_tensor(model, name, &v) || v.dtype != PL_DT_F32)
                    return -1;
                t += s_mem_time(s_sum_thread, v.data, NULL, v.nbytes / 8, 1, 1, 0.0);
                bytes += (double)v.nbytes;
            }
        }
        best = r > 0 ? PL_MIN(best, t) : best;
    }
    return bytes / best / 1e9;
}

typedef struct {
    double tok_s, pf_s, wbytes, pf_flops;    /* the backend: decode s/token, prefill s */
    double read_gbps, read1_gbps, copy_gbps; /* the machine */
    double mapped_gbps, rows_gbps, gemm1_gbps, gemv_gbps;
    double big_gflops, ideal_s, ideal_flops;
    double att_s, swiglu_s, norm_s, rope_s; /* prefill's other kernels, all layers */
    pl_be_calib_t calib;
} s_res_t;

/* Time the prefill's kernels other than the matrix products, called as the backend calls them
 * for one sequence of T tokens, over all layers. */
static pl_status_t s_prefill_parts(const pl_model_config_t *c, int T, int reps, s_res_t *r)
{
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t TI = (size_t)T * c->intermediate, half = (size_t)c->head_dim / 2;
    size_t sizes[] = {T * q_dim, T * kv_dim, T * kv_dim, T * q_dim, (size_t)PL_CPU_ATT_ROWS * T,
                      TI, TI, TI, (size_t)T * c->hidden, T * half, T * half};
    float *buf[PL_ARRAY_SIZE(sizes)] = {0};
    double *inv = malloc(half * sizeof(double));
    int *pos = malloc((size_t)T * sizeof(int));
    pl_status_t st = inv && pos ? PL_OK : pl_error(PL_ERR_NOMEM, "prefill part buffers");

    for (size_t i = 0; i < PL_ARRAY_SIZE(sizes) && !st; i++) {
        if (!(buf[i] = malloc(sizes[i] * sizeof(float))))
            st = pl_error(PL_ERR_NOMEM, "prefill part buffers");
        for (size_t j = 0; !st && j < sizes[i]; j++)
            buf[i][j] = pl_rand_uniform(10 + i, j) - 0.5f;
    }
    if (!st) { /* real rotations, so that repeated rope keeps q and k at their size */
        for (int i = 0; i < T; i++)
            pos[i] = i;
        pl_model_rope_inv_freq(c, inv);
        pl_cpu_rope_table(inv, (int)half, pos, T, buf[9], buf[10]);
    }
    r->att_s = r->swiglu_s = r->norm_s = r->rope_s = 1e30;
    for (int rep = 0; rep <= reps && !st; rep++) {
        double att = 0, sw = 0, norm = 0, rope = 0, t0;
        for (int l = 0; l < c->n_layers; l++) {
            t0 = pl_now();
            pl_cpu_rmsnorm(buf[8], buf[6], T, c->hidden, c->rms_eps, buf[8]);
            norm += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_rope_apply(buf[0], T, (int)q_dim, c->n_heads, c->head_dim, buf[9], buf[10]);
            pl_cpu_rope_apply(buf[1], T, (int)kv_dim, c->n_kv_heads, c->head_dim, buf[9],
                              buf[10]);
            rope += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_attention(buf[0], T, 0, buf[1], buf[2], c->n_heads, c->n_kv_heads,
                             c->head_dim, buf[4], buf[3]);
            att += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_rmsnorm(buf[8], buf[6], T, c->hidden, c->rms_eps, buf[8]);
            norm += pl_now() - t0;
            memcpy(buf[5], buf[7], TI * sizeof(float)); /* swiglu works in place: fresh input */
            t0 = pl_now();
            pl_cpu_swiglu(buf[5], buf[6], TI);
            sw += pl_now() - t0;
        }
        if (rep == 0) /* warm-up */
            continue;
        r->att_s = PL_MIN(r->att_s, att);
        r->swiglu_s = PL_MIN(r->swiglu_s, sw);
        r->norm_s = PL_MIN(r->norm_s, norm);
        r->rope_s = PL_MIN(r->rope_s, rope);
    }
    for (size_t i = 0; i < PL_ARRAY_SIZE(sizes); i++)
        free(buf[i]);
    free(inv);
    free(pos);
    return st;
}

/* (b) and the references: read and copy over a buffer as large as the weights, sgemm. */
static pl_status_t s_machine_refs(pl_model_t *model, const pl_model_config_t *c,
                                  const s_opts_t *o, s_res_t *r)
{
    size_t words = (size_t)(r->wbytes / 8);
    uint64_t *src = malloc(words * 8), *dst = malloc(words * 8);
    if (!src || !dst) {
        free(src);
        free(dst);
        return pl_error(PL_ERR_NOMEM, "bandwidth buffers of %zu bytes", words * 8);
    }
    for (size_t i = 0; i < words; i++)
        src[i] = i;
    memset(dst, 0, words * 8);
    double bytes = (double)words * 8;
    int th = o->threads, reps = o->reps;
    r->read_gbps = bytes / s_mem_time(s_sum_thread, src, NULL, words, th, reps, S_WARM_S) / 1e9;
    r->copy_gbps = bytes / s_mem_time(s_copy_thread, src, dst, words, th, reps, S_WARM_S) / 1e9;
    r->read1_gbps = bytes / s_mem_time(s_sum_thread, src, NULL, words, 1, reps, S_WARM_S) / 1e9;
    free(src);
    free(dst);
    r->mapped_gbps = s_mapped_read_gbps(model, c, o->reps);

    openblas_set_num_threads(o->threads);
    r->ideal_s = s_prefill_sgemm_ideal(c, o->prefill, o->reps, &r->ideal_flops);
    double big_s = s_sgemm_time(o->prefill, c->intermediate, c->hidden, 3 * o->reps);
    int in = c->intermediate, h = c->hidden;
    r->rows_gbps = s_stream_gbps(S_VIA_ROWS, th, in, h, r->wbytes, reps);
    r->gemm1_gbps = s_stream_gbps(S_VIA_SGEMM, th, in, h, r->wbytes, reps);
    r->gemv_gbps = s_stream_gbps(S_VIA_SGEMV, th, in, h, r->wbytes, reps);
    if (r->ideal_s <= 0 || big_s <= 0 || r->rows_gbps <= 0 || r->gemm1_gbps <= 0 ||
        r->gemv_gbps <= 0)
        return pl_error(PL_ERR_NOMEM, "sgemm reference buffers");
    r->big_gflops = 2.0 * o->prefill * c->intermediate * c->hidden / big_s / 1e9;
    return s_prefill_parts(c, o->prefill, o->reps, r);
}

static void s_print(const pl_model_config_t *c, const s_opts_t *o, const s_res_t *r)
{
    double dec_gbps = r->wbytes / r->tok_s / 1e9, pf_gflops = r->pf_flops / r->pf_s / 1e9;
    double gemm_s = r->ideal_s * c->n_layers, T = o->prefill;
    double rest = r->pf_s - gemm_s - r->att_s - r->swiglu_s - r->norm_s - r->rope_s;

    printf("| measure | ours | machine reference | ratio | target |\n");
    printf("| --- | ---: | ---: | ---: | --- |\n");
    printf("| decode, batch 1: time per token | %.1f ms (%.1f tok/s) | | | |\n", r->tok_s * 1e3,
           1.0 / r->tok_s);
    printf("| decode, batch 1: weight bytes streamed | %.2f GB/s (%.1f MB/token) | %.2f GB/s "
           "plain sum, %d thread(s) | %.0f%% | >= 60%% |\n", dec_gbps, r->wbytes / 1e6,
           r->read_gbps, o->threads, 100.0 * dec_gbps / r->read_gbps);
    printf("| prefill, %d tokens | %.1f GFLOP/s (%.0f tok/s) | %.1f GFLOP/s sgemm %dx%dx%d | "
           "%.0f%% | |\n\n", o->prefill, pf_gflops, T / r->pf_s, r->big_gflops, o->prefill,
           c->intermediate, c->hidden, 100.0 * pf_gflops / r->big_gflops);

    printf("| where the prefill's %.0f ms go (%d tokens, %d layers) | ms | share |\n",
           r->pf_s * 1e3, o->prefill, c->n_layers);
    printf("| --- | ---: | ---: |\n");
    printf("| matrix products, timed as plain sgemm on the same shapes (%.1f GFLOP/s) | %.1f | "
           "%.0f%% |\n", r->ideal_flops / r->ideal_s / 1e9, gemm_s * 1e3, 100 * gemm_s / r->pf_s);
    printf("| attention (pl_cpu_attention) | %.1f | %.0f%% |\n", r->att_s * 1e3,
           100 * r->att_s / r->pf_s);
    printf("| swiglu (pl_cpu_swiglu, one thread) | %.1f | %.0f%% |\n", r->swiglu_s * 1e3,
           100 * r->swiglu_s / r->pf_s);
    printf("| rmsnorm + rope (one thread) | %.1f | %.0f%% |\n", (r->norm_s + r->rope_s) * 1e3,
           100 * (r->norm_s + r->rope_s) / r->pf_s);
    if (rest >= 0)
        printf("| the rest (head, adds, copies, GEMMs slower in place than alone) | %.1f | "
               "%.0f%% |\n\n", rest * 1e3, 100 * rest / r->pf_s);
    else /* the parts were timed separately, some under more load than the prefill */
        printf("| the rest: below zero, %.1f ms (timing noise: rerun on a quiet machine) | | |"
               "\n\n", rest * 1e3);

    double mb = r->wbytes / 1e6;
    printf("| machine reference | value |\n| --- | ---: |\n");
    printf("| read (plain sum), %.0f MB, %d thread(s) | %.2f GB/s |\n", mb, o->threads,
           r->read_gbps);
    if (o->threads > 1)
        printf("| read (plain sum), %.0f MB, 1 thread | %.2f GB/s |\n", mb, r->read1_gbps);
    if (r->mapped_gbps > 0)
        printf("| read (plain sum), 1 thread, of the model's own f32 matrices in their file "
               "mapping | %.2f GB/s |\n", r->mapped_gbps);
    printf("| memcpy, %.0f MB, %d thread(s) (bytes copied; twice that crosses the bus) | "
           "%.2f GB/s |\n", mb, o->threads, r->copy_gbps);
    printf("| sgemm %dx%dx%d, %d thread(s) | %.1f GFLOP/s |\n", o->prefill, c->intermediate,
           c->hidden, o->threads, r->big_gflops);
    printf("| batch-1 products %dx%d over %.0f MB: pl_cpu_matmul_rows (the backend's decode "
           "kernel) | %.2f GB/s |\n", c->intermediate, c->hidden, mb, r->rows_gbps);
    printf("| batch-1 products %dx%d over %.0f MB: sgemm with 1 row | %.2f GB/s |\n",
           c->intermediate, c->hidden, mb, r->gemm1_gbps);
    printf("| batch-1 products %dx%d over %.0f MB: sgemv | %.2f GB/s |\n", c->intermediate,
           c->hidden, mb, r->gemv_gbps);
    printf("| backend calibrate(): sgemm / memory read | %.1f GFLOP/s / %.2f GB/s |\n",
           r->calib.gflops, r->calib.mem_gbps);
}

int main(int argc, char **argv)
{
    s_opts_t o;
    char tmp[] = "/tmp/pl-bench-decode-XXXXXX";
    const char *dir;
    pl_model_t *model = NULL;
    pl_be_device_t *dev = NULL;
    s_bench_t b = {0};
    s_res_t r = {0};
    int rc = 1;

    if (s_parse(argc, argv, &o))
        return s_usage(stderr, 2);
    dir = o.model_dir;
    if (!dir) {
        if (!mkdtemp(tmp) || s_run_mkmodel(tmp)) {
            fprintf(stderr, "bench_decode: could not make a model in %s\n", tmp);
            s_rmdir(tmp);
            return 1;
        }
        dir = tmp;
    }
    if (pl_model_open(dir, &model) || pl_be_device_open(pl_be_cpu(), 0, o.threads, &dev))
        goto err;
    b.cfg = *pl_model_config(model);
    pl_be_stage_params_t sp = {.first_layer = 0, .last_layer = b.cfg.n_layers - 1,
                               .has_embed = true, .has_head = true, .max_seqs = 2,
                               .max_ctx = PL_MAX(o.prefill, o.steps + 1), .max_tokens = o.prefill};
    if (sp.max_ctx > b.cfg.max_pos) {
        pl_error(PL_ERR_RANGE, "--prefill / --steps need %d positions, the model has %d",
                 sp.max_ctx, b.cfg.max_pos);
        goto err;
    }
    b.ids = malloc((size_t)o.prefill * sizeof(int32_t));
    b.out = malloc((size_t)b.cfg.vocab * sizeof(float));
    if (!b.ids || !b.out || pl_be_stage_load(dev, model, &sp, &b.stage))
        goto err;
    s_machine(o.threads);
    printf("model: %s: %d layers, hidden %d, intermediate %d, heads %d/%d, vocab %d, "
           "%.1f MB as stored\n\n", dir, b.cfg.n_layers, b.cfg.hidden, b.cfg.intermediate,
           b.cfg.n_heads, b.cfg.n_kv_heads, b.cfg.vocab, pl_model_weight_bytes(model) / 1e6);
    fflush(stdout);
    double m0, self0, m1, self1, t0 = pl_now();
    s_cpu_times(&m0, &self0);
    /* (a) decode at batch 1 and (c) prefill, through the backend */
    if (s_bench_decode(&b, &o, &r.tok_s) || s_bench_prefill(&b, &o, &r.pf_s))
        goto err;
    r.wbytes = s_weight_bytes(&b.cfg);
    r.pf_flops = s_prefill_flops(&b.cfg, o.prefill);
    if (s_machine_refs(model, &b.cfg, &o, &r) || pl_be_device_calibrate(dev, &r.calib))
        goto err;
    s_cpu_times(&m1, &self1);
    s_print(&b.cfg, &o, &r);
    printf("\nother processes kept %.2f of %ld cores busy on average during the measurements "
           "(figures are comparable only when this is near 0)\n",
           PL_MAX(0.0, (m1 - m0) - (self1 - self0)) / (pl_now() - t0),
           sysconf(_SC_NPROCESSORS_ONLN));
    rc = 0;
err:
    if (rc)
        fprintf(stderr, "bench_decode: %s\n", pl_error_msg());
    pl_be_stage_unload(&b.stage);
    pl_be_device_close(&dev);
    free(b.ids);
    free(b.out);
    pl_model_destroy(&model);
    if (!o.model_dir)
        s_rmdir(tmp);
    return rc;
}
