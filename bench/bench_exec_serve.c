/* What a deployment's serving loop costs beside the batch job's: the same prompts on the same two
 * stage executors (threads over UCX, one BLAS thread each), once as a batch job and once as a
 * deployment's requests (SEQ_ADD all at once, SEQ_OUT read back), wall and CPU time per step, and
 * the last stage's compute (where prompt chunks that sample nothing skip the LM head).
 * Usage: bench_exec_serve [--model DIR] [--prompts N] [--prompt-len N] [--chunk N] [--new N]
 *                         [--runs N] */
#include "backends/cpu/cpu_blas_core.h"
#include "common/util.h"
#include "pipeline/exec.h"
#include "transport/act_token.h"
#include "transport/msg.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define S_JOB 5u

typedef struct {
    const char *model;
    int n_prompts, n_new, runs, layers;
    int prompt_len, chunk; /* tokens per prompt; prefill_chunk (0: whole prompts) */
} s_opts_t;

typedef struct {
    double wall_s, cpu_s, compute_s, last_compute_s;
    double steps; /* forward calls of stage 0 */
    long tokens;
} s_run_t;

static double s_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static void s_die(const char *what)
{
    fprintf(stderr, "bench_exec_serve: %s: %s\n", what, pl_error_msg());
    exit(1);
}

/* The value of an unlabelled metric in the registry's text. */
static double s_metric(pl_metrics_t *r, const char *name)
{
    char *text, want[128];
    size_t len;
    if (pl_metrics_render(r, &text, &len))
        s_die("metrics");
    snprintf(want, sizeof(want), "\n%s ", name);
    const char *at = strstr(text, want);
    double v = at ? strtod(at + strlen(want), NULL) : 0;
    free(text);
    return v;
}

static void s_spec(const s_opts_t *o, bool serve, pl_job_spec_t *spec)
{
    pl_job_spec_init(spec);
    snprintf(spec->model, sizeof(spec->model), "%s", o->model);
    spec->gen.max_new_tokens = o->n_new;
    spec->gen.stop_at_eos = false;
    spec->gen.trace = false;
    spec->gen.prefill_chunk = o->chunk;
    if (serve) {
        spec->serve = (pl_job_serve_t){.on = true,
                                       .name = "b",
                                       .kv_slots = o->n_prompts,
                                       .max_queue = 0,
                                       .max_tokens = o->n_new,
                                       .step_tokens = o->n_prompts * o->prompt_len};
        return;
    }
    spec->n_prompts = o->n_prompts;
    spec->prompts = calloc((size_t)o->n_prompts, sizeof(*spec->prompts));
    spec->prompt_len = calloc((size_t)o->n_prompts, sizeof(int));
    for (int i = 0; i < o->n_prompts; i++) {
        spec->prompts[i] = malloc((size_t)o->prompt_len * sizeof(int32_t));
        for (int k = 0; k < o->prompt_len; k++)
            spec->prompts[i][k] = 3 + (i * 31 + k * 7) % 200;
        spec->prompt_len[i] = o->prompt_len;
    }
}

static s_run_t s_run(const s_opts_t *o, bool serve)
{
    pl_tx_ctx_t *ctx;
    pl_be_device_t *dev[2];
    pl_exec_t *x[2];
    pl_metrics_t *reg;
    pl_metric_t *mbs, *compute, *compute_last;
    pl_act_token_t token;
    pl_msg_t m;
    char *addr[2];
    static const double bounds[] = {1e-4, 1e-3, 1e-2, 1e-1, 1};
    if (pl_tx_ctx_new(&ctx) || pl_act_token_new(&token) || pl_metrics_new(&reg) ||
        pl_metrics_counter(reg, "mb_total", "forward calls", NULL, &mbs) ||
        pl_metrics_histogram(reg, "compute", "forward seconds", NULL, bounds, 5, &compute) ||
        pl_metrics_histogram(reg, "compute_last", "last stage's forward seconds", NULL, bounds, 5,
                             &compute_last))
        s_die("setup");
    for (int s = 0; s < 2; s++) {
        if (pl_be_device_open(pl_be_cpu(), 0, 1, &dev[s]))
            s_die("device");
        pl_exec_params_t p = {
            .job_id = S_JOB,
            .stage = s,
            .n_stages = 2,
            .first_layer = s * (o->layers / 2),
            .last_layer = s ? o->layers - 1 : o->layers / 2 - 1,
            .microbatches = 2,
            .max_ctx = o->prompt_len + o->n_new + 1,
            .max_tokens = o->n_prompts * o->prompt_len,
            .dev = dev[s],
            .threads = 1,
            .metrics = {.microbatches = s == 0 ? mbs : NULL,
                        .compute_s = s == 0 ? compute : compute_last}};
        s_spec(o, serve, &p.spec);
        if (pl_exec_start(ctx, &p, &x[s]))
            s_die("executor");
    }
    for (int s = 0; s < 2; s++) {
        if (pl_tx_recv(pl_exec_socket(x[s]), 60000, NULL, NULL, &m) || m.type != PL_MSG_READY)
            s_die("ready");
        addr[s] = m.ready.ucx_addr;
        m.ready.ucx_addr = NULL;
        pl_msg_clear(&m);
    }
    double t0 = pl_now(), c0 = s_cpu();
    for (int s = 0; s < 2; s++) {
        pl_msg_init(&m, PL_MSG_START);
        m.start = (pl_msg_start_t){.job = S_JOB,
                                   .stage = s,
                                   .epoch = 1,
                                   .next = addr[1 - s],
                                   .prev = addr[1 - s],
                                   .token = token};
        if (pl_tx_send(pl_exec_socket(x[s]), NULL, &m))
            s_die("start");
    }
    s_run_t r = {0};
    if (serve) {
        pl_job_spec_t prompts;
        s_spec(o, false, &prompts);
        for (int i = 0; i < o->n_prompts; i++)
            for (int s = 0; s < 2; s++) {
                pl_msg_init(&m, PL_MSG_SEQ_ADD);
                m.seq_add = (pl_msg_seq_add_t){.job = S_JOB,
                                               .stage = s,
                                               .epoch = 1,
                                               .req = (uint64_t)i + 1,
                                               .n_prompt = o->prompt_len,
                                               .prompt = prompts.prompts[i],
                                               .gen = prompts.gen};
                if (pl_tx_send(pl_exec_socket(x[s]), NULL, &m))
                    s_die("SEQ_ADD");
            }
        pl_job_spec_clear(&prompts);
        for (int done = 0; done < o->n_prompts;) {
            if (pl_tx_recv(pl_exec_socket(x[1]), 60000, NULL, NULL, &m) || m.type != PL_MSG_SEQ_OUT)
                s_die("SEQ_OUT");
            r.tokens += m.seq_out.n_tokens;
            done += m.seq_out.finish != PL_FINISH_NONE;
            pl_msg_clear(&m);
        }
    } else {
        for (int s = 0; s < 2; s++) {
            if (pl_tx_recv(pl_exec_socket(x[s]), 120000, NULL, NULL, &m) || m.type != PL_MSG_DONE)
                s_die("done");
            if (s == 1)
                r.tokens = m.done.stats.generated;
            pl_msg_clear(&m);
        }
    }
    r.wall_s = pl_now() - t0;
    r.cpu_s = s_cpu() - c0;
    r.steps = s_metric(reg, "mb_total");
    r.compute_s = s_metric(reg, "compute_sum");
    r.last_compute_s = s_metric(reg, "compute_last_sum");
    for (int s = 0; s < 2; s++) {
        pl_exec_destroy(&x[s]);
        pl_be_device_close(&dev[s]);
        free(addr[s]);
    }
    pl_metrics_destroy(&reg);
    pl_tx_ctx_destroy(&ctx);
    return r;
}

/* A deployment with nothing to do: the CPU its loops take per second of idling. */
static double s_idle_cpu(const s_opts_t *o, double secs)
{
    pl_tx_ctx_t *ctx;
    pl_be_device_t *dev[2];
    pl_exec_t *x[2];
    pl_act_token_t token;
    pl_msg_t m;
    char *addr[2];
    if (pl_tx_ctx_new(&ctx) || pl_act_token_new(&token))
        s_die("setup");
    for (int s = 0; s < 2; s++) {
        if (pl_be_device_open(pl_be_cpu(), 0, 1, &dev[s]))
            s_die("device");
        pl_exec_params_t p = {.job_id = S_JOB,
                              .stage = s,
                              .n_stages = 2,
                              .first_layer = s * (o->layers / 2),
                              .last_layer = s ? o->layers - 1 : o->layers / 2 - 1,
                              .microbatches = 2,
                              .max_ctx = o->prompt_len + o->n_new + 1,
                              .max_tokens = o->n_prompts * o->prompt_len,
                              .dev = dev[s],
                              .threads = 1};
        s_spec(o, true, &p.spec);
        if (pl_exec_start(ctx, &p, &x[s]))
            s_die("executor");
    }
    for (int s = 0; s < 2; s++) {
        if (pl_tx_recv(pl_exec_socket(x[s]), 60000, NULL, NULL, &m) || m.type != PL_MSG_READY)
            s_die("ready");
        addr[s] = m.ready.ucx_addr;
        m.ready.ucx_addr = NULL;
        pl_msg_clear(&m);
    }
    for (int s = 0; s < 2; s++) {
        pl_msg_init(&m, PL_MSG_START);
        m.start = (pl_msg_start_t){.job = S_JOB,
                                   .stage = s,
                                   .epoch = 1,
                                   .next = addr[1 - s],
                                   .prev = addr[1 - s],
                                   .token = token};
        if (pl_tx_send(pl_exec_socket(x[s]), NULL, &m))
            s_die("start");
    }
    usleep(500 * 1000); /* past the link probe */
    double c0 = s_cpu();
    usleep((useconds_t)(secs * 1e6));
    double c = (s_cpu() - c0) / secs;
    for (int s = 0; s < 2; s++) {
        pl_exec_destroy(&x[s]);
        pl_be_device_close(&dev[s]);
        free(addr[s]);
    }
    pl_tx_ctx_destroy(&ctx);
    return c;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double s_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), s_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    /* on OpenBLAS's tuned kernels, as pipeld computes (it restarts this program when needed) */
    pl_cpu_blas_core_fix(argv);
    static char model[PATH_MAX + 16], dir[PATH_MAX];
    s_opts_t o = {.n_prompts = 8, .n_new = 48, .runs = 3, .layers = 8, .prompt_len = 24};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            o.model = argv[i + 1];
        else if (!strcmp(argv[i], "--prompts"))
            o.n_prompts = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--new"))
            o.n_new = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs"))
            o.runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt-len"))
            o.prompt_len = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk"))
            o.chunk = atoi(argv[i + 1]);
    }
    if (o.n_prompts < 1 || o.n_new < 2 || o.runs < 1 || o.runs > 32 || o.prompt_len < 1 ||
        o.prompt_len > 1900 || o.chunk < 0) {
        fprintf(stderr, "usage: bench_exec_serve [--model DIR] [--prompts N] [--prompt-len N] "
                        "[--chunk N] [--new N] [--runs N]\n");
        return 2;
    }
    if (!o.model) { /* a small model beside this binary's pl-mkmodel */
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
            return 1;
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        snprintf(dir, sizeof(dir), "/tmp/bench_exec_serve.XXXXXX");
        if (!mkdtemp(dir))
            return 1;
        snprintf(model, sizeof(model), "%s/m", dir);
        char cmd[3 * PATH_MAX];
        snprintf(cmd, sizeof(cmd),
                 "%s/pl-mkmodel --out %s --layers 8 --hidden 256 "
                 "--intermediate 512 --heads 8 --kv-heads 4 --vocab 2048 --seed 3 >/dev/null",
                 exe, model);
        if (system(cmd) != 0)
            return 1;
        o.model = model;
    } else {
        pl_model_config_t cfg;
        if (pl_model_config_load(o.model, &cfg))
            s_die(o.model);
        o.layers = cfg.n_layers;
    }
    double load0[1] = {0}, load1[1] = {0};
    getloadavg(load0, 1);
    double bw[32], bc[32], sw[32], sc[32], bcomp[32], scomp[32], blast[32], slast[32];
    double bsteps = 0, ssteps = 0;
    long btok = 0, stok = 0;
    s_run(&o, false);                  /* untimed: warm caches and threads */
    for (int i = 0; i < o.runs; i++) { /* interleaved, so drifting load hits both alike */
        s_run_t b = s_run(&o, false), s = s_run(&o, true);
        bw[i] = b.wall_s / b.steps, bc[i] = b.cpu_s / b.steps, bcomp[i] = b.compute_s / b.steps;
        sw[i] = s.wall_s / s.steps, sc[i] = s.cpu_s / s.steps, scomp[i] = s.compute_s / s.steps;
        blast[i] = b.last_compute_s, slast[i] = s.last_compute_s;
        bsteps = b.steps, ssteps = s.steps, btok = b.tokens, stok = s.tokens;
    }
    double idle = s_idle_cpu(&o, 2.0);
    getloadavg(load1, 1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench_exec_serve: %s, %d layers on 2 stages (threads, UCX, 1 BLAS thread each), "
           "%d prompts of %d tokens (prefill chunk %d), %d new tokens each, 2 microbatches; "
           "medians of %d runs\n",
           o.model, o.layers, o.n_prompts, o.prompt_len, o.chunk, o.n_new, o.runs);
    printf("load average %.2f -> %.2f on %ld cores%s\n\n", load0[0], load1[0], cores,
           load0[0] > 0.5 || load1[0] > 0.5 ? ": MEASURED UNDER LOAD (other processes ran)" : "");
    printf("| loop | stage 0 steps | tokens | wall per step | CPU per step (all threads) | "
           "stage 0 compute per step (reference) | last stage compute per run |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    double mbw = s_median(bw, o.runs), mbc = s_median(bc, o.runs), mbp = s_median(bcomp, o.runs);
    double msw = s_median(sw, o.runs), msc = s_median(sc, o.runs), msp = s_median(scomp, o.runs);
    double mbl = s_median(blast, o.runs), msl = s_median(slast, o.runs);
    printf("| batch job | %.0f | %ld | %.3f ms | %.3f ms | %.3f ms | %.1f ms |\n", bsteps, btok,
           mbw * 1e3, mbc * 1e3, mbp * 1e3, mbl * 1e3);
    printf("| deployment | %.0f | %ld | %.3f ms | %.3f ms | %.3f ms | %.1f ms |\n", ssteps, stok,
           msw * 1e3, msc * 1e3, msp * 1e3, msl * 1e3);
    printf("| serving - batch | | | %+.3f ms | %+.3f ms | |\n\n", (msw - mbw) * 1e3,
           (msc - mbc) * 1e3);
    printf("an idle deployment (nothing in flight): %.4f CPU seconds per second\n", idle);
    if (dir[0]) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            return 1;
    }
    return 0;
}
