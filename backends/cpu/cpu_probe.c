/* CPU backend discovery and calibration: one device "cpu" described from /proc, and a short
 * sgemm rate, memory read bandwidth (the device's and its host's), decode row rate, prefill pass
 * and attention measurement. */
#include "backends/cpu/cpu_dev.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_wcopy.h"

#include "common/log.h"
#include "common/util.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define S_GEMM_N 512
#define S_GEMM_SECONDS 0.05
#define S_GEMM_PASSES 3
#define S_CALIB_WALL_MAX_S 0.4 /* the GEMM passes, however little CPU the load leaves them */
#define S_READ_BYTES ((size_t)128 << 20) /* larger than any one last-level cache */
#define S_READ_CHUNK ((size_t)8 << 20)
#define S_READ_MAX_THREADS 16
#define S_READ_LOCK "/tmp/pipeld-calib-read.lock" /* one host's daemons read one at a time */
#define S_READ_LOCK_WAIT_S 10.0
#define S_READ_HOST_S 0.08   /* the host's passes, at most (the calibration stays short) */
#define S_READ_HOST_PASSES 3 /* and no more than this many that qualify */
#define S_READ_FILL_S 0.15   /* the host's buffer: at most this long faulting it in */
#define S_READ_PER_READER ((size_t)64 << 20) /* the host's: past a core complex's own L3 */
/* The decode rows' probe: bf16 weights small enough to stay in a core's caches, so that what
 * it times is the rows' work, not the pass over the weights (the bandwidth's part) */
#define S_ROW_OUTS 512
#define S_ROW_COLS 1024
#define S_ROW_MANY 16
#define S_ROW_SECONDS 0.02
#define S_ROW_WALL_MAX_S 0.04 /* per timed pass, however little CPU the load leaves it */
/* Prefill's probe: sequences through a [S_SEQ_OUTS x S_ROW_COLS] bf16 product (an MLP's, 5.8 MB:
 * past a core's own caches) as the stages run it, bf16 tiles converted to f32 for sgemm, at these
 * lengths (all on sgemm's path); the pass is read at S_SEQ_TOKENS */
#define S_SEQ_OUTS 2816
#define S_SEQ_TOKENS 64
static const int s_fit_tokens[] = {32, 48, 64};
/* Prefill attention's probe: one S_ATT_TOKENS-token chunk of a prompt against the S_ATT_POS0
 * positions cached before it, in a Llama shape of 1024 wide (16 heads of 64, 8 KV heads) */
#define S_ATT_TOKENS 128
#define S_ATT_POS0 384
#define S_ATT_HEADS 16
#define S_ATT_KV 8
#define S_ATT_HD 64

/* Instruction-set extensions worth telling the scheduler and the user about. */
static const char *const s_isa_flags[] = {
    "avx2",        "fma",      "f16c",  "avx512f", "avx512bw", "avx512_vnni",
    "avx512_bf16", "amx_bf16", "asimd", "sve",     "sve2",
};

static int s_online_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static char *s_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Append each known flag found in the space-separated list `flags` to isa. */
static void s_isa_from_flags(const char *flags, char *isa, size_t isa_len)
{
    for (size_t f = 0; f < PL_ARRAY_SIZE(s_isa_flags); f++) {
        const char *name = s_isa_flags[f], *p = flags;
        size_t n = strlen(name);
        bool found = false;
        while ((p = strstr(p, name)) != NULL) {
            bool start = p == flags || p[-1] == ' ' || p[-1] == '\t';
            bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '\t' || p[n] == '\n';
            if (start && end) {
                found = true;
                break;
            }
            p += n;
        }
        size_t used = strlen(isa);
        if (found && used + n + 2 <= isa_len)
            snprintf(isa + used, isa_len - used, "%s%s", used ? " " : "", name);
    }
}

/* Model name and ISA flags from /proc/cpuinfo; leaves the defaults when a line is missing. */
static void s_read_cpuinfo(pl_be_device_info_t *info)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char *line = NULL;
    size_t cap = 0;
    bool have_name = false, have_flags = false;

    if (!f)
        return;
    while ((!have_name || !have_flags) && getline(&line, &cap, f) > 0) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *key = s_trim(line), *val = s_trim(colon + 1);
        if (!have_name && (strcmp(key, "model name") == 0 || strcmp(key, "Hardware") == 0) &&
            val[0]) {
            snprintf(info->name, sizeof(info->name), "%s", val);
            have_name = true;
        } else if (!have_flags && (strcmp(key, "flags") == 0 || strcmp(key, "Features") == 0)) {
            s_isa_from_flags(val, info->isa, sizeof(info->isa));
            have_flags = true;
        }
    }
    free(line);
    fclose(f);
}

pl_status_t pl_cpu_mem_available(uint64_t *bytes_p)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;

    if (!f)
        return pl_error(PL_ERR_IO, "/proc/meminfo: %s", strerror(errno));
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            fclose(f);
            *bytes_p = (uint64_t)kb * 1024u;
            return PL_OK;
        }
    }
    fclose(f);
    return pl_error(PL_ERR_IO, "/proc/meminfo: no MemAvailable line");
}

static void s_fill_info(int threads, pl_be_device_info_t *info)
{
    uint64_t mem = 0;
    memset(info, 0, sizeof(*info));
    snprintf(info->backend, sizeof(info->backend), "cpu");
    snprintf(info->name, sizeof(info->name), "cpu");
    info->index = 0;
    info->cores = threads > 0 ? threads : s_online_cores();
    if (pl_cpu_mem_available(&mem) != PL_OK)
        pl_error_clear();
    info->mem_bytes = mem;
    s_read_cpuinfo(info);
}

pl_status_t pl_cpu_probe(pl_be_device_info_t *infos, int max, int *n_p)
{
    if (!infos || max < 1)
        return pl_error(PL_ERR_INVALID, "cpu probe: room for %d devices", max);
    s_fill_info(0, &infos[0]);
    *n_p = 1;
    return PL_OK;
}

pl_status_t pl_cpu_open(int index, int threads, void **dev_p)
{
    pl_cpu_dev_t *dev;

    if (index != 0)
        return pl_error(PL_ERR_NOT_FOUND, "cpu device %d: the cpu backend has only device 0",
                        index);
    if (threads < 0)
        return pl_error(PL_ERR_INVALID, "cpu threads %d: must be 0 (all) or positive", threads);
    dev = calloc(1, sizeof(*dev));
    if (!dev)
        return pl_error(PL_ERR_NOMEM, "cpu device: out of memory");
    s_fill_info(threads, &dev->info);
    dev->threads = dev->info.cores;
    if (pl_cpu_pool_create(dev->threads, &dev->pool) != PL_OK) {
        free(dev);
        return PL_ERR_NOMEM;
    }
    *dev_p = dev;
    return PL_OK;
}

void pl_cpu_close(void *dev_v)
{
    pl_cpu_dev_t *dev = dev_v;
    if (!dev)
        return;
    pl_cpu_pool_destroy(&dev->pool);
    free(dev);
}

/* The process's CPU seconds. Calibration divides its work by the CPU time its threads got, not
 * by wall time: on a machine shared with other work a daemon starting while others compute would
 * otherwise report a fraction of its device's rate, and the planner would split layers by the
 * moment's load (two identical daemons measured 1.2 and 4.1 GFLOP/s that way). */
static double s_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds the calibration's `threads` threads ran between (wall0, cpu0) and now: the CPU time
 * per thread, never more than the wall time (nor 0). */
static double s_busy_s(double wall0, double cpu0, int threads)
{
    double wall = pl_now() - wall0, cpu = (s_cpu_now() - cpu0) / PL_MAX(1, threads);
    return cpu > 1e-6 && cpu < wall ? cpu : wall;
}

/* The f32 product as a stage's prefill runs it (pl_cpu_gemm_seq: OpenBLAS tiles on the pool). */
static void s_gemm_call(pl_cpu_dev_t *dev, const float *a, const pl_cpu_wmat_t *b, float *c)
{
    pl_cpu_gemm_seq(dev->pool, a, S_GEMM_N, b, NULL, c);
}

static double s_gemm_gflops(pl_cpu_dev_t *dev)
{
    size_t n = S_GEMM_N, bytes = n * n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    double gflops = 0.0;

    if (a && b && c) {
        for (size_t i = 0; i < n * n; i++) {
            a[i] = (float)(i % 7) * 0.25f;
            b[i] = (float)(i % 5) * 0.5f;
        }
        pl_cpu_wmat_t bm = {.type = PL_WT_F32,
                            .rows = S_GEMM_N,
                            .cols = S_GEMM_N,
                            .row_bytes = S_GEMM_N * sizeof(float),
                            .data = b};
        /* The first call pays for OpenBLAS's buffer allocation. */
        s_gemm_call(dev, a, &bm, c);
        /* the best of a few passes: a pass that shared its core's caches with a neighbour's
         * burst reads low even in CPU time */
        double start = pl_now();
        for (int pass = 0; pass < S_GEMM_PASSES && pl_now() - start < S_CALIB_WALL_MAX_S; pass++) {
            int iters = 0;
            double t0 = pl_now(), c0 = s_cpu_now(), t;
            do {
                s_gemm_call(dev, a, &bm, c);
                iters++;
                t = s_busy_s(t0, c0, dev->threads);
            } while (t < S_GEMM_SECONDS && iters < 1000 && pl_now() - start < S_CALIB_WALL_MAX_S);
            gflops = PL_MAX(gflops, 2.0 * (double)n * n * n * iters / t / 1e9);
        }
    }
    free(a);
    free(b);
    free(c);
    return gflops;
}

typedef struct {
    const float *data;
    size_t n;
    float sum;
    int cpu;              /* the CPU this reader runs on; -1: wherever the process may */
    double t0, t1, cpu_s; /* its read: wall clock at start and end, its thread's CPU seconds */
} s_read_job_t;

static double s_thread_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *s_read_thread(void *arg)
{
    s_read_job_t *job = arg;
    if (job->cpu >= 0) { /* the host's figure: one reader per CPU, not all on the daemon's own */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(job->cpu, &set);
        (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set); /* else where it may */
    }
    double c0 = s_thread_cpu_now();
    job->t0 = pl_now();
    job->sum = cblas_sasum((int)job->n, job->data, 1);
    job->t1 = pl_now();
    job->cpu_s = s_thread_cpu_now() - c0;
    return NULL;
}

/* The wall time of a pass of the host's readers jobs[0..threads) when they all read at once:
 * each ran on its CPU for 90% of its read and for 90% of the pass's span; else 0 (not timed). */
static double s_host_pass(const s_read_job_t *jobs, int threads)
{
    double lo = jobs[0].t0, hi = jobs[0].t1;
    for (int i = 1; i < threads; i++) {
        lo = PL_MIN(lo, jobs[i].t0);
        hi = PL_MAX(hi, jobs[i].t1);
    }
    for (int i = 0; i < threads; i++) {
        double own = jobs[i].t1 - jobs[i].t0;
        if (!(own > 0) || jobs[i].cpu_s < 0.9 * own || own < 0.9 * (hi - lo))
            return 0.0;
    }
    return hi - lo;
}

/* Read bandwidth of the n floats of buf (larger than any cache), split across `threads`
 * readers: the device's own (host false: the first reader on this thread, the others where the
 * process may run), or the host's (one reader on each of the first `threads` online CPUs, the
 * best of S_READ_HOST_PASSES within S_READ_HOST_S: a core woken from idle reads slowly at first).
 * The host's is timed on the wall clock over passes whose readers all ran at once, each on its
 * CPU nearly all of the span (s_host_pass): the process's CPU time, which the device's figure
 * is divided by, would credit readers that a loaded machine ran one after another with the
 * sum of their single rates (142 GB/s on 2 cores that give 50). 0 when no pass was so. */
static double s_read_time_gbps(const float *buf, size_t n, int threads, bool host)
{
    double start = pl_now();
    s_read_job_t jobs[S_READ_MAX_THREADS];
    pthread_t tids[S_READ_MAX_THREADS];
    double best = 0.0;
    volatile float sink = 0.0f;
    int timed = 0; /* the host's passes that qualified */
    threads = PL_MAX(1, PL_MIN(threads, S_READ_MAX_THREADS));
    for (int pass = 0;
         pass < 2 || (host && timed < S_READ_HOST_PASSES && pl_now() - start < S_READ_HOST_S);
         pass++) {
        int started = 0;
        double t0 = pl_now(), c0 = s_cpu_now();
        for (int i = 0; i < threads; i++) {
            jobs[i].data = buf + n / threads * i;
            jobs[i].n = i == threads - 1 ? n - n / threads * i : n / threads;
            jobs[i].cpu = host ? i : -1;
            if ((i == 0 && !host) || pthread_create(&tids[i], NULL, s_read_thread, &jobs[i]) != 0)
                continue; /* job 0 (and any thread that failed to start) runs here below */
            started |= 1 << i;
        }
        for (int i = 0; i < threads; i++)
            if (!(started & (1 << i))) {
                jobs[i].cpu = -1; /* this thread's own CPU stays as it is */
                s_read_thread(&jobs[i]);
            }
        for (int i = 0; i < threads; i++)
            if (started & (1 << i))
                pthread_join(tids[i], NULL);
        double t = host ? s_host_pass(jobs, threads) : s_busy_s(t0, c0, threads);
        timed += host && t > 0;
        for (int i = 0; i < threads; i++)
            sink += jobs[i].sum;
        if (t > 0 && (double)n * sizeof(float) / t / 1e9 > best)
            best = (double)n * sizeof(float) / t / 1e9;
        if (t > 0.05) /* a slow machine gets one pass: the whole calibration stays short */
            break;
    }
    (void)sink;
    return best;
}

/* w laid out in *copy as a stage holds its weights (packed when PL_CPU_WEIGHTS asks), for the
 * probes to time the kernels a stage runs; when the copy cannot be made, w stays as given and
 * its error is cleared (a probe's failure is its rate of 0, and a message left behind would be
 * read as the calibration's). Free *copy with pl_cpu_wcopy_free either way. */
static void s_stage_layout(pl_cpu_wmat_t *w, pl_cpu_wcopy_t *copy)
{
    pl_cpu_wmat_t *wp = w;
    *copy = (pl_cpu_wcopy_t){0};
    if (pl_cpu_wcopy_make(&wp, 1, pl_cpu_wcopy_pack_wanted(), copy) != PL_OK) {
        *copy = (pl_cpu_wcopy_t){0};
        pl_error_clear();
    }
}

/* The device's read bandwidth (`threads` readers) and the host's (a reader on every online
 * CPU, at most S_READ_MAX_THREADS, over S_READ_PER_READER each) over one buffer larger than any
 * cache. Daemons on one host
 * that start together take turns here (a lock file): one's figure read while another streams
 * would be a fraction of it, and the host's is only what one reader set alone gets. */
static void s_read_gbps(int threads, double *dev_gbps, double *host_gbps)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int readers = (int)PL_MAX(1, PL_MIN(cpus, S_READ_MAX_THREADS));
    size_t n = 0, chunk = S_READ_CHUNK / sizeof(float);
    size_t all = PL_MAX(S_READ_BYTES, (size_t)readers * S_READ_PER_READER) / sizeof(float);
    float *buf = malloc(all * sizeof(float));
    double t_fill = pl_now();
    *dev_gbps = *host_gbps = 0.0;
    if (!buf)
        return;
    /* Fault the pages in before timing. Not zeros: malloc + memset 0 may become calloc, whose
     * untouched pages all map the one shared zero page and read at cache speed. Where page
     * faults are slow (some VMs) stop early and measure a smaller buffer. */
    while (n < S_READ_BYTES / sizeof(float) && (n < 2 * chunk || pl_now() - t_fill < 0.1)) {
        memset(buf + n, 0x3c, chunk * sizeof(float));
        n += chunk;
    }
    /* the host's readers each past any one cache: a reader of a part that fits its core's L3
     * reads at its speed (a 16-32 MB buffer gave 84-142 GB/s on 2 cores that give 50); where
     * the faults are too slow for that, fewer readers, and with fewer than 2 none */
    size_t n_all = n;
    while (n_all < all && pl_now() - t_fill < S_READ_FILL_S) {
        memset(buf + n_all, 0x3c, PL_MIN(chunk, all - n_all) * sizeof(float));
        n_all += PL_MIN(chunk, all - n_all);
    }
    readers = (int)PL_MIN((size_t)readers, n_all * sizeof(float) / S_READ_PER_READER);
    /* Any local user can open the lock: it is waited for S_READ_LOCK_WAIT_S at most (one held
     * for good is a neighbour's fault, not a reason never to start), never a link followed. */
    int lock = open(S_READ_LOCK, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    for (double end = pl_now() + S_READ_LOCK_WAIT_S; lock >= 0;) {
        if (flock(lock, LOCK_EX | LOCK_NB) == 0)
            break;
        if ((errno != EWOULDBLOCK && errno != EINTR) || pl_now() > end) {
            close(lock); /* no lock: measure all the same */
            lock = -1;
            break;
        }
        usleep(5000);
    }
    *dev_gbps = s_read_time_gbps(buf, n, threads, false);
    *host_gbps = readers >= 2 ? s_read_time_gbps(buf, n_all, readers, true) : 0.0;
    pl_log_debug("cpu calibration: host read bandwidth %.1f GB/s, %d readers over %.0f MB%s",
                 *host_gbps, readers, n_all * sizeof(float) / 1048576.0,
                 readers < 2      ? " (too few: not measured)"
                 : *host_gbps > 0 ? ""
                                  : " (no pass had every reader on its CPU: not measured)");
    if (lock >= 0)
        close(lock); /* and the lock with it */
    free(buf);
}

/* Seconds per call of pl_cpu_gemm_rows on nr rows against w: the best of two timed runs. */
static double s_rows_time(pl_cpu_dev_t *dev, const float *x, const int *rows, int nr,
                          const pl_cpu_wmat_t *w, float *y)
{
    double best = 0.0;
    pl_cpu_gemm_rows(dev->pool, x, rows, nr, w, y); /* warm the caches */
    for (int pass = 0; pass < 2; pass++) {
        int iters = 0;
        double t0 = pl_now(), c0 = s_cpu_now(), t;
        do {
            pl_cpu_gemm_rows(dev->pool, x, rows, nr, w, y);
            iters++;
            t = s_busy_s(t0, c0, dev->threads);
        } while (t < S_ROW_SECONDS && iters < 100000 && pl_now() - t0 < S_ROW_WALL_MAX_S);
        if (best == 0.0 || t / iters < best)
            best = t / iters;
    }
    return best;
}

/* The rate of a decode step's rows on the kernels decode runs (bf16 weights, as most models
 * store them): S_ROW_MANY rows against weights in cache, so that the pass over the weights
 * (the bandwidth's part) does not bound it. Measured here: 45 GFLOP/s on 1 thread, against 88
 * of sgemm, and the same slope over 138 MB of weights (44 per added row). */
static double s_dec_gflops(pl_cpu_dev_t *dev)
{
    size_t wn = (size_t)S_ROW_OUTS * S_ROW_COLS;
    uint16_t *wb = malloc(wn * sizeof(uint16_t));
    float *x = malloc((size_t)S_ROW_MANY * S_ROW_COLS * sizeof(float));
    float *y = malloc((size_t)S_ROW_MANY * S_ROW_OUTS * sizeof(float));
    int rows[S_ROW_MANY];
    double gflops = 0.0;
    if (wb && x && y) {
        for (size_t i = 0; i < wn; i++)
            wb[i] = (uint16_t)(0x3c00u | (i % 61)); /* bf16 near 1/128 */
        for (size_t i = 0; i < (size_t)S_ROW_MANY * S_ROW_COLS; i++)
            x[i] = (float)(i % 13) * 0.125f - 0.75f;
        for (int r = 0; r < S_ROW_MANY; r++)
            rows[r] = r;
        pl_cpu_wmat_t w = {.type = PL_WT_BF16, .rows = S_ROW_OUTS, .cols = S_ROW_COLS,
                           .row_bytes = S_ROW_COLS * sizeof(uint16_t), .data = wb};
        pl_cpu_wcopy_t copy;
        s_stage_layout(&w, &copy);
        double t = s_rows_time(dev, x, rows, S_ROW_MANY, &w, y);
        pl_cpu_wcopy_free(&copy);
        if (t > 0)
            gflops = 2.0 * S_ROW_MANY * (double)wn / t / 1e9;
    }
    free(wb);
    free(x);
    free(y);
    return gflops;
}

/* Seconds per call of fn(arg): the best of `runs` timed runs of at least S_ROW_SECONDS of CPU
 * time, each cut at S_ROW_WALL_MAX_S of wall time. No warm-up call: the callers' inputs were just
 * written (in cache), and OpenBLAS's buffers were made by the sgemm probe. */
static double s_call_time(pl_cpu_dev_t *dev, void (*fn)(pl_cpu_dev_t *, void *), void *arg,
                          int runs)
{
    double best = 0.0;
    for (int pass = 0; pass < runs; pass++) {
        int iters = 0;
        double t0 = pl_now(), c0 = s_cpu_now(), t;
        do {
            fn(dev, arg);
            iters++;
            t = s_busy_s(t0, c0, dev->threads);
        } while (t < S_ROW_SECONDS && iters < 100000 && pl_now() - t0 < S_ROW_WALL_MAX_S);
        if (best == 0.0 || t / iters < best)
            best = t / iters;
    }
    return best;
}

typedef struct {
    const float *x;
    int n;
    const pl_cpu_wmat_t *w;
    float *tile, *y;
} s_seq_call_t;

static void s_seq_call(pl_cpu_dev_t *dev, void *arg)
{
    s_seq_call_t *a = arg;
    pl_cpu_gemm_seq(dev->pool, a->x, a->n, a->w, a->tile, a->y);
}

/* The least-squares line through (n[i], t[i]), i < k, at n = at. */
static double s_line_at(const int *n, const double *t, int k, double at)
{
    double sn = 0, st = 0, snn = 0, snt = 0;
    for (int i = 0; i < k; i++) {
        sn += n[i];
        st += t[i];
        snn += (double)n[i] * n[i];
        snt += n[i] * t[i];
    }
    double den = k * snn - sn * sn;
    if (!(den > 0))
        return 0.0;
    double slope = (k * snt - sn * st) / den;
    return (st - slope * sn) / k + slope * at;
}

/* Prefill's pass over a product's weights for each sequence (GB/s of stored bf16 bytes): what a
 * S_SEQ_TOKENS-token call of the product as a stage computes it (pl_cpu_gemm_seq) costs beyond
 * its flops at the sgemm rate `gflops` (the rate the planner charges them at), with that call's
 * time read off a line fitted through one timed run of each length of s_fit_tokens, not one
 * timing (its three runs cost what the single timing's warm-up and two runs did). The line's
 * own intercept is not the pass: the product runs below the 512^3 rate at these sizes, and with its
 * flops charged at that rate the intercept left a 1-stage prefill 1.5x short (8.4 GB/s, where
 * the same call less its flops gives ~3). 0 when the call runs no slower than its flops (no pass
 * to charge). */
static double s_pass_fit_gbps(pl_cpu_dev_t *dev, double gflops)
{
    enum { K = sizeof(s_fit_tokens) / sizeof(s_fit_tokens[0]) };
    int n_max = s_fit_tokens[K - 1];
    size_t wn = (size_t)S_SEQ_OUTS * S_ROW_COLS;
    uint16_t *wb = malloc(wn * sizeof(uint16_t));
    float *x = malloc((size_t)n_max * S_ROW_COLS * sizeof(float));
    float *y = malloc((size_t)n_max * S_SEQ_OUTS * sizeof(float));
    float *tile = malloc((size_t)dev->threads * PL_CPU_TILE_ROWS * S_ROW_COLS * sizeof(float));
    double gbps = 0.0, t[K] = {0};
    if (wb && x && y && tile && gflops > 0) {
        for (size_t i = 0; i < wn; i++)
            wb[i] = (uint16_t)(0x3c00u | (i % 61));
        for (size_t i = 0; i < (size_t)n_max * S_ROW_COLS; i++)
            x[i] = (float)(i % 13) * 0.125f - 0.75f;
        pl_cpu_wmat_t w = {.type = PL_WT_BF16, .rows = S_SEQ_OUTS, .cols = S_ROW_COLS,
                           .row_bytes = S_ROW_COLS * sizeof(uint16_t), .data = wb};
        pl_cpu_wcopy_t copy;
        s_stage_layout(&w, &copy);
        for (int i = 0; i < K; i++) {
            s_seq_call_t a = {x, s_fit_tokens[i], &w, tile, y};
            t[i] = s_call_time(dev, s_seq_call, &a, 1);
        }
        pl_cpu_wcopy_free(&copy);
        double pass = s_line_at(s_fit_tokens, t, K, S_SEQ_TOKENS) -
                      2.0 * S_SEQ_TOKENS * (double)wn / (gflops * 1e9);
        if (pass > 0)
            gbps = (double)wn * sizeof(uint16_t) / pass / 1e9;
    }
    free(wb);
    free(x);
    free(y);
    free(tile);
    return gbps;
}

typedef struct {
    const float *q, *k, *v;
    float *scores, *out;
} s_att_call_t;

static void s_att_call(pl_cpu_dev_t *dev, void *arg)
{
    s_att_call_t *a = arg;
    pl_cpu_attention_seq(dev->pool, a->q, S_ATT_TOKENS, S_ATT_POS0, a->k, a->v, S_ATT_HEADS,
                         S_ATT_KV, S_ATT_HD, a->scores, a->out);
}

/* Prefill attention's rate (GFLOP/s) as the planner counts its flops (4 x heads x head_dim per
 * query and cached position it attends to, its own included): one chunk of a prompt against the
 * prefix cached before it, as a stage's prefill runs it (pl_cpu_attention_seq). Measured
 * here far below the sgemm rate (1,024-token prompt: attention 0.49 s of 1.70 s on 6 layers). */
static double s_attn_gflops(pl_cpu_dev_t *dev)
{
    size_t pos = S_ATT_POS0 + S_ATT_TOKENS, qn = (size_t)S_ATT_TOKENS * S_ATT_HEADS * S_ATT_HD;
    size_t kvn = pos * S_ATT_KV * S_ATT_HD;
    float *q = malloc(qn * sizeof(float)), *out = malloc(qn * sizeof(float));
    float *k = malloc(kvn * sizeof(float)), *v = malloc(kvn * sizeof(float));
    float *scores = malloc((size_t)dev->threads * PL_CPU_ATT_ROWS * pos * sizeof(float));
    double gflops = 0.0;
    if (q && out && k && v && scores) {
        for (size_t i = 0; i < qn; i++)
            q[i] = (float)(i % 17) * 0.0625f - 0.5f;
        for (size_t i = 0; i < kvn; i++) {
            k[i] = (float)(i % 11) * 0.09375f - 0.5f;
            v[i] = (float)(i % 7) * 0.125f - 0.375f;
        }
        s_att_call_t a = {q, k, v, scores, out};
        double t = s_call_time(dev, s_att_call, &a, 1);
        /* positions attended: S_ATT_POS0 + 1 .. S_ATT_POS0 + S_ATT_TOKENS */
        double pairs = S_ATT_TOKENS * (S_ATT_POS0 + (S_ATT_TOKENS + 1) / 2.0);
        if (t > 0)
            gflops = 4.0 * S_ATT_HEADS * S_ATT_HD * pairs / t / 1e9;
    }
    free(q);
    free(out);
    free(k);
    free(v);
    free(scores);
    return gflops;
}

pl_status_t pl_cpu_calibrate(void *dev_v, pl_be_calib_t *calib)
{
    pl_cpu_dev_t *dev = dev_v;
    pl_be_calib_t c;

    openblas_set_num_threads(1); /* as a stage runs it: the tiles split on the pool */
    c.gflops = s_gemm_gflops(dev);
    s_read_gbps(dev->threads, &c.mem_gbps, &c.host_gbps);
    c.dec_gflops = s_dec_gflops(dev);
    c.pass_gbps = s_pass_fit_gbps(dev, c.gflops); /* 0 allowed: no pass to charge */
    c.attn_gflops = s_attn_gflops(dev);
    /* left at the device's threads for the training products (cblas on the caller's thread, no
     * pool); an inference stage's forward sets 1 again for itself before it uses the pool */
    openblas_set_num_threads(dev->threads);
    if (c.gflops <= 0.0 || c.mem_gbps <= 0.0 || c.dec_gflops <= 0.0 || c.attn_gflops <= 0.0)
        return pl_error(PL_ERR_NOMEM, "cpu calibration: could not allocate its buffers");
    pl_log_debug("cpu calibration: %.1f GFLOP/s sgemm, %.1f GB/s read (host %.1f), %.1f GFLOP/s "
                 "decode rows, %.2f GB/s prefill passes, %.1f GFLOP/s prefill attention, %d "
                 "threads",
                 c.gflops, c.mem_gbps, c.host_gbps, c.dec_gflops, c.pass_gbps, c.attn_gflops,
                 dev->threads);
    *calib = c;
    return PL_OK;
}
