/* The node daemon: device discovery, registration, heartbeats, and the executors of its stages. */
#include "daemon/node.h"

#include "backends/backend.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/front.h"
#include "daemon/node_dev.h"
#include "daemon/node_metrics.h"
#include "daemon/node_reg.h"
#include "daemon/node_serve.h"
#include "daemon/node_train.h"
#include "pipeline/exec.h"
#include "pipeline/gen_log.h"
#include "pipeline/trace.h"
#include "transport/keys.h"
#include "transport/sock.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_EXECS 16
#define S_HELLO_FIRST_S 0.25 /* registration retries: capped exponential backoff, jittered */
#define S_HELLO_CAP_S 8.0
#define S_RELEASE_TIMEOUT_S 60.0
#define S_DEVICE_HEALTH_S 5.0 /* how often device health feeds the metrics */

typedef struct {
    const pl_cfg_node_t *cfg;
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *dealer;
    pl_node_devs_t hw; /* its devices, and the backends that offer none */
    pl_exec_t *execs[S_MAX_EXECS];
    double done_at[S_MAX_EXECS]; /* when the executor reported DONE; 0 while it runs */
    uint32_t epoch[S_MAX_EXECS]; /* the assignment each executor runs */
    int n_execs;
    bool registered;
    double next_hb, next_hello;
    pl_front_t *front;
    pl_node_metrics_t metrics;
    uint64_t gen_seen[S_MAX_EXECS]; /* of each executor's tokens, counted in the metrics */
    size_t text_sent[S_MAX_EXECS];  /* of each executor's streamed text, bytes sent */
    bool hb_unanswered;             /* a heartbeat left since the last WELCOME */
    double last_welcome, next_dev_health;
    double started_at;             /* for the heartbeat's uptime */
    pl_msg_node_health_t sys;      /* host and device health, refreshed with the metrics */
    int dead_after_ms; /* from WELCOME */
    double hello_backoff;           /* the next retry's base delay */
    pthread_t reapers[S_MAX_EXECS]; /* threads that wait for canceled executors to end */
    int n_reapers;
    unsigned rand_state;
    pl_node_reg_t reg; /* what silence or another protocol on the node endpoint means */
} s_node_t;

/* The CPUs this daemon may run on (its affinity; CPUs 0..62), for HELLO; 0 when unknown. */
static uint64_t s_cpu_mask(void)
{
    cpu_set_t set;
    uint64_t mask = 0;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 0;
    for (int i = 0; i < 63; i++)
        if (CPU_ISSET(i, &set))
            mask |= 1ull << i;
    return mask;
}

static void s_health(const s_node_t *n, pl_msg_heartbeat_t *h)
{
    double load[3] = {0};
    long rss_kb = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        long pages, res;
        if (fscanf(f, "%ld %ld", &pages, &res) == 2)
            rss_kb = res * (sysconf(_SC_PAGESIZE) / 1024);
        fclose(f);
    }
    getloadavg(load, 3);
    memset(h, 0, sizeof(*h));
    snprintf(h->node, sizeof(h->node), "%s", n->cfg->name);
    for (int i = 0; i < n->n_execs && h->n_stages < PL_MSG_MAX_STAGES; i++)
        h->stages[h->n_stages++] =
            (pl_msg_progress_t){.job = pl_exec_job(n->execs[i]),
                                .stage = pl_exec_stage(n->execs[i]),
                                .epoch = n->epoch[i],
                                .generated = (int64_t)pl_exec_generated(n->execs[i]),
                                .busy_s = pl_exec_busy_s(n->execs[i]),
                                .seqs_done = (int64_t)pl_exec_seqs_done(n->execs[i])};
    h->rss_kb = rss_kb;
    h->load1 = load[0] > 0 ? load[0] : 0;
    h->sys = n->sys;
    snprintf(h->sys.version, sizeof(h->sys.version), "%s", PL_VERSION_STRING);
    h->sys.uptime_s = pl_now() - n->started_at;
}

/* The next pieces of the executors' streamed text into heartbeat h (after s_health filled its
 * stages in executor order), at most PL_MSG_MAX_HB_TEXT bytes in all; the rest waits for the
 * next heartbeat. Counted as sent by s_text_sent once the heartbeat left. */
static void s_text_pieces(s_node_t *n, pl_msg_heartbeat_t *h)
{
    for (int i = 0; i < h->n_stages && h->text_used < PL_MSG_MAX_HB_TEXT; i++) {
        pl_msg_progress_t *p = &h->stages[i];
        size_t k = pl_exec_text(n->execs[i], n->text_sent[i], h->text + h->text_used,
                                PL_MSG_MAX_HB_TEXT - h->text_used);
        if (k == 0)
            continue;
        p->text_at = (int64_t)n->text_sent[i];
        p->text_off = h->text_used;
        p->text_len = (uint32_t)k;
        h->text_used += (uint32_t)k;
    }
    h->text[h->text_used] = '\0';
}

static void s_text_sent(s_node_t *n, const pl_msg_heartbeat_t *h)
{
    for (int i = 0; i < h->n_stages; i++)
        n->text_sent[i] += h->stages[i].text_len;
}

static pl_status_t s_send(s_node_t *n, const pl_msg_t *m)
{
    if (m->type == PL_MSG_HELLO || m->type == PL_MSG_HEARTBEAT) /* answered by WELCOME */
        pl_trace_clock_sent();
    pl_status_t st = pl_tx_send(n->dealer, NULL, m);
    if (st && st != PL_ERR_BUSY)
        pl_log_warn("coordinator: cannot send %s: %s", pl_msg_name(m->type), pl_error_msg());
    return st;
}

static void s_hello(s_node_t *n)
{
    pl_msg_t m;
    pl_msg_hello_t *h = &m.hello;
    pl_msg_init(&m, PL_MSG_HELLO);
    snprintf(h->node, sizeof(h->node), "%s", n->cfg->name);
    gethostname(h->host, sizeof(h->host) - 1);
    h->pid = (int)getpid();
    for (int i = 0; i < n->hw.n_devs && h->n_devices < PL_MSG_MAX_DEVICES; i++) {
        const pl_node_dev_t *d = &n->hw.devs[i];
        pl_msg_device_t *v = &h->devices[h->n_devices++];
        snprintf(v->id, sizeof(v->id), "%s", d->id);
        snprintf(v->backend, sizeof(v->backend), "%s", d->info.backend);
        snprintf(v->name, sizeof(v->name), "%s", d->info.name);
        snprintf(v->isa, sizeof(v->isa), "%s", d->info.isa);
        v->cores = d->info.cores;
        v->mem_bytes = d->info.mem_bytes;
        v->gflops = d->calib.gflops;
        v->mem_gbps = d->calib.mem_gbps;
        v->dec_gflops = d->calib.dec_gflops;
        v->pass_gbps = d->calib.pass_gbps;
        v->attn_gflops = d->calib.attn_gflops;
        v->host_gbps = d->calib.host_gbps;
        if (!strcmp(d->info.backend, "cpu"))
            v->cpu_mask = s_cpu_mask();
    }
    h->n_unavailable = n->hw.n_unavailable;
    memcpy(h->unavailable, n->hw.unavailable, sizeof(h->unavailable));
    s_health(n, &h->health);
    char why[256];
    if (pl_tx_sock_handshake_error(n->dealer, why, sizeof(why))) /* say why, not just retry */
        pl_log_warn("coordinator refused the connection: %s", why);
    s_send(n, &m); /* busy while no connection is up: the watch counts the attempt all the same */
    pl_node_reg_hello(&n->reg, pl_now());
    /* jitter in [base/2, base]: daemons that lost the same coordinator do not come back in step */
    double base = n->hello_backoff, u = (double)rand_r(&n->rand_state) / RAND_MAX;
    n->next_hello = pl_now() + base * (0.5 + 0.5 * u);
    n->hello_backoff = PL_MIN(2 * base, S_HELLO_CAP_S);
}

/* Registration lost (the coordinator restarted or forgot this node): register again, soon. */
static void s_reregister(s_node_t *n)
{
    if (!n->registered)
        return;
    n->registered = false;
    pl_node_reg_lost(&n->reg);
    n->hello_backoff = S_HELLO_FIRST_S;
    n->next_hello = pl_now();
    /* a restarted coordinator streams from what it has: send the texts again from the start */
    memset(n->text_sent, 0, sizeof(n->text_sent));
    for (int i = 0; i < n->n_execs; i++) /* and the tokens (it keeps only what extends) */
        if (pl_exec_log(n->execs[i]))
            pl_gen_log_rewind(pl_exec_log(n->execs[i]));
}

static pl_node_dev_t *s_find_dev(s_node_t *n, const char *id)
{
    for (int i = 0; i < n->hw.n_devs; i++)
        if (strcmp(n->hw.devs[i].id, id) == 0)
            return &n->hw.devs[i];
    return NULL;
}

static void s_fail(s_node_t *n, const pl_msg_assign_t *a, pl_status_t code, const char *why)
{
    pl_msg_t m;
    pl_log_error("job %u stage %d: %s", a->job, a->stage, why);
    pl_msg_init(&m, PL_MSG_FAIL);
    m.fail = (pl_msg_fail_t){.job = a->job, .stage = a->stage, .epoch = a->epoch, .code = code};
    snprintf(m.fail.error, sizeof(m.fail.error), "%s", why);
    s_send(n, &m);
}

/* The executor of (job, stage, epoch); stage -1: any stage of the job; epoch 0: any epoch. */
static int s_find_exec(s_node_t *n, uint32_t job, int stage, uint32_t epoch)
{
    for (int i = 0; i < n->n_execs; i++)
        if (pl_exec_job(n->execs[i]) == job && (stage < 0 || pl_exec_stage(n->execs[i]) == stage) &&
            (epoch == 0 || n->epoch[i] == epoch))
            return i;
    return -1;
}

static void s_count_tokens(s_node_t *n);

/* Take executor i out of the table (its tokens counted first); returns it. */
static pl_exec_t *s_take_exec(s_node_t *n, int i)
{
    pl_exec_t *x = n->execs[i];
    s_count_tokens(n);
    n->n_execs--;
    n->execs[i] = n->execs[n->n_execs];
    n->done_at[i] = n->done_at[n->n_execs];
    n->epoch[i] = n->epoch[n->n_execs];
    n->gen_seen[i] = n->gen_seen[n->n_execs];
    n->text_sent[i] = n->text_sent[n->n_execs];
    return x;
}

static void s_drop_exec(s_node_t *n, int i)
{
    pl_exec_t *x = s_take_exec(n, i);
    pl_exec_destroy(&x);
}

static void *s_reap_main(void *arg)
{
    pl_exec_t *x = arg;
    pl_exec_destroy(&x); /* waits for the executor's current forward call */
    return NULL;
}

/* Cancel executor i without waiting for it on this thread (the one that heartbeats): it leaves
 * the table now, a reaper thread waits for its current call and frees it. */
static void s_cancel_exec(s_node_t *n, int i)
{
    pl_exec_t *x = s_take_exec(n, i);
    pl_exec_cancel(x);
    if (n->n_reapers < S_MAX_EXECS &&
        pthread_create(&n->reapers[n->n_reapers], NULL, s_reap_main, x) == 0) {
        n->n_reapers++;
        return;
    }
    pl_exec_destroy(&x); /* no thread to spare: wait here */
}

/* Join the reapers that are done; all of them when `all` (before the devices close). */
static void s_reap(s_node_t *n, bool all)
{
    for (int i = n->n_reapers - 1; i >= 0; i--) {
        if (all ? pthread_join(n->reapers[i], NULL) : pthread_tryjoin_np(n->reapers[i], NULL))
            continue;
        n->reapers[i] = n->reapers[--n->n_reapers];
    }
}

static void s_on_assign(s_node_t *n, pl_msg_assign_t *a)
{
    pl_node_dev_t *d = s_find_dev(n, a->device);
    pl_status_t st;
    if (!d || n->n_execs == S_MAX_EXECS) {
        s_fail(n, a, !d ? PL_ERR_NOT_FOUND : PL_ERR_BUSY,
               !d ? "assignment names an unknown device" : "too many stages on this node");
        return;
    }
    int old;
    while ((old = s_find_exec(n, a->job, a->stage, 0)) >= 0) { /* superseded by this one */
        pl_log_info("job %u stage %d: epoch %u replaced by epoch %u", a->job, a->stage,
                    n->epoch[old], a->epoch);
        s_cancel_exec(n, old);
    }
    pl_train_ops_t *train_ops = NULL; /* a training stage's schedule (node_train.c) */
    if (a->spec.train && (st = pl_node_train_ops(a, &train_ops))) {
        s_fail(n, a, st, pl_error_msg());
        return;
    }
    pl_exec_params_t p = {.job_id = a->job, .stage = a->stage, .n_stages = a->n_stages,
                          .first_layer = a->first, .last_layer = a->last, .spec = a->spec,
                          .microbatches = a->microbatches, .max_ctx = a->max_ctx,
                          .max_tokens = a->max_tokens, .dev = d->dev,
                          .threads = n->cfg->threads, .metrics = n->metrics.exec,
                          .train_ops = train_ops};
    pl_job_spec_init(&a->spec); /* moved into the params */
    pl_exec_t *x;
    if ((st = pl_exec_start(n->ctx, &p, &x))) {
        s_fail(n, a, st, pl_error_msg());
        return;
    }
    n->done_at[n->n_execs] = 0;
    n->gen_seen[n->n_execs] = 0;
    n->text_sent[n->n_execs] = 0;
    n->epoch[n->n_execs] = a->epoch;
    n->execs[n->n_execs++] = x;
    pl_log_info("job %u: stage %d/%d, layers %d-%d on %s", a->job, a->stage, a->n_stages,
                a->first, a->last, a->device);
}

/* PROGRESS beside each heartbeat: the tokens each last stage sampled since its last report,
 * which the coordinator persists so a lost stage costs no work. */
static void s_progress(s_node_t *n)
{
    for (int i = 0; i < n->n_execs; i++) {
        pl_gen_log_t *log = pl_exec_log(n->execs[i]);
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_PROGRESS);
        if (!log || pl_gen_log_take(log, PL_MSG_MAX_PROGRESS_TOKENS, &m.progress) ||
            !m.progress.n_seqs) {
            pl_msg_clear(&m);
            continue;
        }
        m.progress.job = pl_exec_job(n->execs[i]);
        m.progress.stage = pl_exec_stage(n->execs[i]);
        m.progress.epoch = n->epoch[i];
        if (s_send(n, &m) == PL_OK)
            pl_gen_log_commit(log, &m.progress);
        pl_msg_clear(&m);
    }
}

/* Tokens the executors sampled since last counted, into the metrics. */
static void s_count_tokens(s_node_t *n)
{
    for (int i = 0; i < n->n_execs; i++) {
        uint64_t g = pl_exec_generated(n->execs[i]);
        if (g > n->gen_seen[i]) {
            pl_metrics_add(n->metrics.tokens, NULL, (double)(g - n->gen_seen[i]));
            n->gen_seen[i] = g;
        }
    }
}

/* A CPU device's health from the host's: memory used of the host's, load per core as its
 * utilisation. */
static void s_cpu_health(const s_node_t *n, pl_msg_dev_health_t *d)
{
    double load[1];
    if (n->sys.mem_total_kb >= 0 && n->sys.mem_avail_kb >= 0) {
        d->mem_total = n->sys.mem_total_kb * 1024;
        d->mem_used = (n->sys.mem_total_kb - n->sys.mem_avail_kb) * 1024;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(load, 1) == 1 && cores > 0)
        d->util_pct = PL_MIN(100.0, PL_MAX(0.0, 100.0 * load[0] / (double)cores));
}

/* The node's metrics and readiness, from the event loop: ready while registered, the
 * coordinator answered within dead_after, and no device failed. */
static void s_publish(s_node_t *n, double now)
{
    char why[256] = "";
    if (now >= n->next_dev_health) {
        n->next_dev_health = now + S_DEVICE_HEALTH_S;
        pl_msg_node_health_init(&n->sys);
        pl_node_metrics_host(&n->sys);
        for (int i = 0; i < n->hw.n_devs; i++) {
            pl_msg_dev_health_t *dh = &n->sys.devices[PL_MIN(i, PL_MSG_MAX_DEVICES - 1)];
            pl_status_t st =
                pl_node_metrics_device(&n->metrics, n->hw.devs[i].id, n->hw.devs[i].dev, dh);
            if (i < PL_MSG_MAX_DEVICES)
                n->sys.n_devices = i + 1;
            if (st == PL_ERR_UNSUPPORTED && !strcmp(n->hw.devs[i].info.backend, "cpu"))
                s_cpu_health(n, dh); /* the CPU backend reports none: the host's figures */
            bool failed = st && st != PL_ERR_UNSUPPORTED;
            if (failed && !n->hw.devs[i].failed)
                pl_log_warn("device %s: health: %s", n->hw.devs[i].id, pl_error_msg());
            n->hw.devs[i].failed = failed;
        }
    }
    s_count_tokens(n);
    pl_metrics_set(n->metrics.stages, NULL, n->n_execs);
    double silent = now - n->last_welcome, limit = n->dead_after_ms / 1000.0;
    if (!n->registered)
        snprintf(why, sizeof(why), "not registered with the coordinator");
    else if (silent > limit)
        snprintf(why, sizeof(why), "the coordinator has not answered for %.1f s", silent);
    for (int i = 0; i < n->hw.n_devs && !why[0]; i++)
        if (n->hw.devs[i].failed)
            snprintf(why, sizeof(why), "device %s failed", n->hw.devs[i].id);
    pl_front_set_ready(n->front, !why[0], why);
}

/* TRACE from the coordinator: a running stage's trace so far, as TRACED. */
static void s_on_trace(s_node_t *n, const pl_msg_trace_ref_t *q)
{
    int i = s_find_exec(n, q->job, q->stage, q->epoch);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_TRACED);
    m.traced = (pl_msg_traced_t){.job = q->job, .stage = q->stage, .epoch = q->epoch};
    if (i < 0 || pl_exec_trace(n->execs[i], &m.traced.trace))
        return; /* not here (any more), or no tracing: the coordinator has what it has */
    s_send(n, &m);
    pl_msg_clear(&m);
}

/* Returns false when the daemon should stop. */
static bool s_on_coord(s_node_t *n)
{
    pl_msg_t m;
    pl_status_t st = pl_tx_recv(n->dealer, 0, NULL, NULL, &m);
    if (st == PL_ERR_BUSY)
        return true;
    if (st) {
        pl_log_warn_limited("coordinator: %s", pl_error_msg());
        return true;
    }
    if (!pl_node_reg_proto_ok(&n->reg, &m)) {
        pl_msg_clear(&m);
        return true;
    }
    switch (m.type) {
    case PL_MSG_WELCOME: /* to HELLO, and to every heartbeat */
        if (!n->registered)
            pl_log_info("registered with the coordinator");
        n->registered = true;
        pl_node_reg_done(&n->reg);
        n->hb_unanswered = false;
        n->last_welcome = pl_now();
        pl_trace_clock_answer(m.welcome.clock_ns); /* the round trip times the trace clock */
        if (m.welcome.dead_after_ms > 0)
            n->dead_after_ms = m.welcome.dead_after_ms;
        n->hello_backoff = S_HELLO_FIRST_S;
        break;
    case PL_MSG_ASSIGN:
        s_on_assign(n, &m.assign);
        break;
    case PL_MSG_START: {
        int i = s_find_exec(n, m.start.job, m.start.stage, m.start.epoch);
        if (i < 0 || pl_tx_send(pl_exec_socket(n->execs[i]), NULL, &m))
            pl_log_warn("START for a stage this node does not run");
        break;
    }
    case PL_MSG_TRACE:
        s_on_trace(n, &m.trace_ref);
        break;
    case PL_MSG_SEQ_ADD: /* a deployment's requests (node_serve.c) */
    case PL_MSG_SEQ_CANCEL:
        pl_node_serve_route(n->execs, n->epoch, n->n_execs, &m, n->metrics.serve_dropped);
        break;
    case PL_MSG_CANCEL: { /* also the release of a finished job's stages */
        int i;
        while ((i = s_find_exec(n, m.cancel.job, m.cancel.stage, m.cancel.epoch)) >= 0) {
            if (!n->done_at[i])
                pl_log_info("job %u stage %d: canceled by the coordinator",
                            pl_exec_job(n->execs[i]), pl_exec_stage(n->execs[i]));
            s_cancel_exec(n, i);
        }
        break;
    }
    case PL_MSG_ERROR:
        pl_log_warn("coordinator says: %s", m.error.message);
        if (m.error.code == PL_ERR_NOT_FOUND) /* it does not know this node (it restarted) */
            s_reregister(n);
        break;
    case PL_MSG_SHUTDOWN:
        pl_log_info("shutdown requested by the coordinator");
        pl_msg_clear(&m);
        return false;
    default:
        pl_log_warn("coordinator: unexpected %s", pl_msg_name(m.type));
    }
    pl_msg_clear(&m);
    return true;
}

/* Pass an executor's READY, DONE or FAIL on to the coordinator. */
static void s_on_exec(s_node_t *n, int i)
{
    pl_msg_t m;
    if (pl_tx_recv(pl_exec_socket(n->execs[i]), 0, NULL, NULL, &m))
        return;
    /* the executor knows its job and stage; the daemon knows which assignment it runs */
    if (m.type == PL_MSG_READY)
        m.ready.epoch = n->epoch[i];
    else if (m.type == PL_MSG_DONE)
        m.done.epoch = n->epoch[i];
    else if (m.type == PL_MSG_FAIL)
        m.fail.epoch = n->epoch[i];
    else if (m.type == PL_MSG_SEQ_OUT)
        m.seq_out.epoch = n->epoch[i];
    else if (m.type == PL_MSG_TRAIN_STEP)
        m.train_step.epoch = n->epoch[i];
    pl_status_t st = pl_tx_send(n->dealer, NULL, &m);
    if (st)
        pl_log_warn("coordinator: cannot forward %s: %s", pl_msg_name(m.type), pl_error_msg());
    if (m.type == PL_MSG_FAIL)
        s_drop_exec(n, i);
    else if (m.type == PL_MSG_DONE) /* its endpoints stay up until the job is released */
        n->done_at[i] = pl_now();
    pl_msg_clear(&m);
}

pl_status_t pl_node_run(const pl_cfg_node_t *cfg, volatile sig_atomic_t *stop)
{
    s_node_t n = {.cfg = cfg,
                  .dead_after_ms = 6 * cfg->heartbeat_ms,
                  .hello_backoff = S_HELLO_FIRST_S,
                  .rand_state = (unsigned)getpid() ^ (unsigned)time(NULL),
                  .started_at = pl_now()};
    pl_status_t st;
    pl_msg_node_health_init(&n.sys);
    pl_node_metrics_host(&n.sys); /* HELLO carries the host's; the devices' follow */

    if ((st = pl_front_start(&cfg->http, NULL, 0, &n.front)) ||
        (st = pl_node_metrics_init(&n.metrics, pl_front_metrics(n.front))))
        goto out;
    if ((st = pl_node_devs_discover(cfg, &n.hw)) || (st = pl_tx_ctx_new(&n.ctx)) ||
        (st = pl_tx_sock_new(n.ctx, PL_TX_DEALER, &n.dealer)) ||
        (st = pl_tx_sock_identity(n.dealer, cfg->name)))
        goto out;
    const char *how = "";
    if ((st = pl_tx_key_client_setup(n.dealer, cfg->coordinator_key, cfg->key_file, "node", &how)))
        goto out;
    pl_log_info("node %s: control plane: %s", cfg->name, how);
    /* the coordinator's node socket, served before its clients (pl_cfg_node_endpoint) */
    char node_ep[sizeof(cfg->coordinator)];
    if ((st = pl_cfg_node_endpoint(cfg->coordinator, cfg->coordinator_node, node_ep,
                                   sizeof(node_ep))) ||
        (st = pl_tx_sock_connect(n.dealer, node_ep))) {
        pl_error_prefix(st, "coordinator: ");
        goto out;
    }
    pl_log_info("node %s: connecting to %s (the node endpoint of %s)", cfg->name, node_ep,
                cfg->coordinator);
    pl_node_reg_init(&n.reg, node_ep, cfg->coordinator, !cfg->coordinator_node[0]);
    s_hello(&n);
    n.next_hb = pl_now() + cfg->heartbeat_ms / 1000.0;
    while (!*stop) {
        pl_tx_sock_t *socks[1 + S_MAX_EXECS];
        bool ready[1 + S_MAX_EXECS];
        int ns = 0;
        socks[ns++] = n.dealer;
        for (int i = 0; i < n.n_execs; i++)
            socks[ns++] = pl_exec_socket(n.execs[i]);
        double now = pl_now(), due = n.registered ? n.next_hb : n.next_hello;
        long wait_ms = due > now ? (long)((due - now) * 1000) + 1 : 0;
        if ((st = pl_tx_poll(socks, ns, wait_ms, ready)))
            break;
        if (ready[0] && !s_on_coord(&n))
            break;
        /* walk backwards: a finished executor is swapped with the last one */
        for (int i = ns - 1; i >= 1; i--)
            if (ready[i] && i - 1 < n.n_execs && socks[i] == pl_exec_socket(n.execs[i - 1]))
                s_on_exec(&n, i - 1);
        now = pl_now();
        if (n.registered && now >= n.next_hb) { /* unregistered: HELLO carries the health */
            pl_msg_t hb;
            pl_msg_init(&hb, PL_MSG_HEARTBEAT);
            s_health(&n, &hb.heartbeat);
            s_text_pieces(&n, &hb.heartbeat);
            pl_metrics_set(n.metrics.rss, NULL, hb.heartbeat.rss_kb * 1024.0);
            if (n.registered && n.hb_unanswered)
                pl_metrics_add(n.metrics.hb_misses, NULL, 1);
            n.hb_unanswered = true;
            if (s_send(&n, &hb) == PL_OK)
                s_text_sent(&n, &hb.heartbeat);
            s_progress(&n);
            n.next_hb = now + cfg->heartbeat_ms / 1000.0;
        }
        if (!n.registered && now >= n.next_hello)
            s_hello(&n);
        if (!n.registered)
            pl_node_reg_check(&n.reg, now);
        s_reap(&n, false);
        for (int i = n.n_execs - 1; i >= 0; i--) /* no release came (coordinator gone) */
            if (n.done_at[i] && now - n.done_at[i] > S_RELEASE_TIMEOUT_S)
                s_drop_exec(&n, i);
        s_publish(&n, now);
    }
    if (*stop && n.dealer) { /* a signal, not the coordinator's SHUTDOWN: tell it first */
        pl_msg_t bye;
        pl_msg_init(&bye, PL_MSG_BYE);
        snprintf(bye.bye.node, sizeof(bye.bye.node), "%s", cfg->name);
        s_send(&n, &bye);
        usleep(100 * 1000); /* the socket does not linger: give the message time to leave */
        pl_log_info("stopping: told the coordinator");
    }
out:
    while (n.n_execs > 0)
        s_drop_exec(&n, n.n_execs - 1);
    s_reap(&n, true); /* no executor may outlive its device */
    pl_node_devs_close(&n.hw);
    pl_tx_sock_destroy(&n.dealer);
    pl_tx_ctx_destroy(&n.ctx);
    pl_front_stop(&n.front);
    return st;
}
