/* Stage executor thread: load, announce the UCX address, wait for START, measure the link to the
 * next stage (link_probe.h), then run the stage's role (first, middle, last or all-in-one) until
 * the job's STOP arrives. */
#include "pipeline/exec_int.h"
#include "pipeline/exec_serve.h"

#include "common/log.h"
#include "common/util.h"
#include "pipeline/gen.h"
#include "pipeline/link_probe.h"
#include "pipeline/trace.h"
#include "pipeline/train_run.h"
#include "transport/act_recv.h"
#include "transport/sock.h"
#include "transport/ucx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Longest wait for the coordinator's release after DONE. */
#define S_LINGER_S 30.0

/* READY, DONE or FAIL to the node's main thread; job and stage are filled in here. */
static pl_status_t s_send_main(pl_exec_t *x, pl_msg_t *m)
{
    if (m->type == PL_MSG_READY)
        m->ready.job = x->p.job_id, m->ready.stage = x->p.stage;
    else if (m->type == PL_MSG_DONE)
        m->done.job = x->p.job_id, m->done.stage = x->p.stage;
    else
        m->fail.job = x->p.job_id, m->fail.stage = x->p.stage;
    pl_status_t st = pl_tx_send(x->sock, NULL, m);
    if (st)
        pl_log_error("job %u stage %d: cannot report %s: %s", x->p.job_id, x->p.stage,
                     pl_msg_name(m->type), pl_error_msg());
    return st;
}

static pl_status_t s_load(pl_exec_t *x)
{
    pl_status_t st;
    const pl_model_config_t *cfg;
    pl_be_stage_params_t sp;

    if ((st = pl_model_open(x->p.spec.model, &x->model)))
        return st;
    cfg = pl_model_config(x->model);
    bool serve = x->p.spec.serve.on; /* a deployment: requests come later (exec_serve.h) */
    if ((st = serve ? pl_exec_serve_load(x, cfg)
                    : pl_gen_job_from_spec(&x->p.spec, x->p.microbatches, cfg, &x->job)))
        return st;
    if (!serve && x->p.n_resume &&
        (st = pl_gen_job_resume(&x->job, x->p.resume, x->p.n_resume, cfg->vocab)))
        return st;
    x->hidden = cfg->hidden;
    x->vocab = cfg->vocab;
    sp = (pl_be_stage_params_t){.first_layer = x->p.first_layer, .last_layer = x->p.last_layer,
                                .has_embed = x->p.stage == 0,
                                .has_head = x->p.stage == x->p.n_stages - 1,
                                .max_seqs = x->job.n_seqs, .max_ctx = x->p.max_ctx,
                                .max_tokens = x->p.max_tokens};
    if (!serve &&
        (sp.max_ctx < pl_gen_job_max_ctx(&x->job) || sp.max_tokens < pl_gen_job_max_tokens(&x->job)))
        return pl_error(PL_ERR_INVALID, "assignment: max_ctx %d / max_tokens %d smaller than the "
                        "job needs", sp.max_ctx, sp.max_tokens);
    if ((st = pl_be_stage_load(x->p.dev, x->model, &sp, &x->stage)))
        return st;
    x->kv_held = serve ? 0 : x->job.n_seqs; /* a deployment's as sequences take them */
    pl_metrics_add(x->p.metrics.kv_slots, NULL, x->kv_held);
    snprintf(x->peer, sizeof(x->peer), "stage %d", (x->p.stage + 1) % x->p.n_stages);
    x->limits = (pl_act_limits_t){.max_seq = (uint32_t)x->job.n_seqs,
                                  .max_tokens = (uint32_t)x->p.max_tokens,
                                  .dim = (uint32_t)x->hidden, .max_pos = (uint32_t)x->p.max_ctx,
                                  .dtype = (uint32_t)x->job.wire_dtype};
    size_t nt = (size_t)x->p.max_tokens, ns = (size_t)x->job.n_seqs;
    x->tokens = malloc(nt * sizeof(int32_t));
    x->out = malloc(PL_MAX(nt * (size_t)x->hidden, ns * (size_t)x->vocab) * sizeof(float));
    if (x->job.wire_dtype != PL_ACT_F32 && x->p.stage > 0 &&
        !(x->in_f32 = malloc(nt * (size_t)x->hidden * sizeof(float))))
        return pl_error(PL_ERR_NOMEM, "stage buffers: out of memory");
    x->ints = malloc(3 * ns * sizeof(int));
    x->seqs_in = malloc(ns * sizeof(pl_act_seq_t));
    x->seqs_out = malloc(ns * sizeof(pl_act_seq_t));
    if (!x->tokens || !x->out || !x->ints || !x->seqs_in || !x->seqs_out)
        return pl_error(PL_ERR_NOMEM, "stage buffers: out of memory");
    return PL_OK;
}

/* Wait for START from the main thread; returns the next and previous stages' addresses
 * (caller frees; NULL when absent). */
static pl_status_t s_wait_start(pl_exec_t *x, char **next_p, char **prev_p)
{
    while (!atomic_load(&x->cancel)) {
        pl_msg_t msg;
        pl_status_t st = pl_tx_recv(x->sock, 100, NULL, NULL, &msg);
        if (st == PL_ERR_BUSY)
            continue;
        if (st)
            return st;
        if (msg.type != PL_MSG_START) {
            pl_msg_clear(&msg);
            continue;
        }
        *next_p = msg.start.next;
        *prev_p = msg.start.prev;
        x->limits.token = msg.start.token; /* what this assignment's messages carry */
        msg.start.next = msg.start.prev = NULL;
        pl_msg_clear(&msg);
        return PL_OK;
    }
    return pl_error(PL_ERR_CANCELED, "canceled before start");
}

static void s_stats(pl_exec_t *x, pl_gen_sink_t *sink, pl_msg_stats_t *s)
{
    double wall = pl_now() - x->t_start;
    *s = (pl_msg_stats_t){.wall_s = wall, .compute_s = x->compute_s, .wait_s = x->wait_s,
                          .messages = (int64_t)x->n_msgs, .tokens = (int64_t)x->n_tokens,
                          .prefill_compute_s = x->phase_s[0],
                          .prefill_calls = (int64_t)x->phase_calls[0],
                          .decode_compute_s = x->phase_s[1],
                          .decode_calls = (int64_t)x->phase_calls[1],
                          .freed_seqs = (int64_t)x->n_freed,
                          .bytes_sent = (int64_t)x->bytes_sent,
                          .has_probe = x->have_probe, .probe = x->probe};
    if (sink) {
        double pf = pl_gen_sink_prefill_done_at(sink);
        s->has_sink = true;
        s->generated = (int64_t)pl_gen_sink_generated(sink);
        s->prefill_s = pf > 0 ? pf - x->t_start : wall;
    }
    s->has_overlap = true;
    s->compute_cpu_s = x->compute_cpu_s;
    s->buf_wait_s = x->buf_wait_s;
    s->sample_s = x->sample_s;
    s->send_s = x->send_s;
    s->max_mb_in_flight = x->max_mb_in_flight;
    if (x->mb_t > 0) {
        pl_exec_mb_in_flight(x, 0);
        s->avg_mb_in_flight = wall > 0 ? x->mb_area / wall : 0;
    }
    snprintf(s->wire_dtype, sizeof(s->wire_dtype), "%s", pl_act_dtype_name(x->job.wire_dtype));
    if (x->next)
        snprintf(s->link, sizeof(s->link), "%s", pl_ucx_ep_transport(x->next));
    if (x->next && x->inbox) {
        /* The data plane's memory: this stage's slots, and its send pool (a buffer per credit
         * the next stage grants, and one to compute into). */
        pl_ucx_credit_stats_t cs;
        pl_ucx_outbox_stats_t os;
        pl_ucx_ep_credit_stats(x->next, &cs);
        pl_ucx_outbox_stats(x->outbox, &os);
        s->credit_waits = cs.waits;
        s->credit_wait_s = cs.wait_s;
        s->send_s = PL_MAX(0.0, x->send_s - cs.wait_s);
        size_t in_bytes = pl_ucx_inbox_bytes(x->inbox);
        s->has_data_plane = true;
        s->data_plane = (pl_msg_data_plane_t){
            .inbox_slots = pl_ucx_inbox_slots(x->inbox),
            .inbox_bytes = (int64_t)in_bytes,
            .send_credits = cs.granted,
            .max_in_flight = cs.max_in_flight,
            .bound_bytes = (int64_t)(in_bytes + (size_t)os.bufs * os.buf_bytes),
            .dropped = (int64_t)pl_act_rx_dropped(&x->rx) + pl_ucx_grants_dropped(x->ucx),
            .progress_thread = pl_ucx_has_progress(x->ucx)};
    }
}

/* Credits both ways and the progress thread: messages from the previous stage land in this
 * stage's inbox, whose slots are granted to it; sends to the next stage wait for its grants.
 * Stage 0's inbox takes the sampled tokens, one message per microbatch at most, so it has a
 * slot for each: the last stage then never waits, and the ring cannot deadlock. */
static pl_status_t s_data_plane(pl_exec_t *x)
{
    pl_act_hdr_t hidden = {.kind = PL_ACT_HIDDEN, .n_seq = x->limits.max_seq,
                           .n_tokens = x->limits.max_tokens, .dim = x->limits.dim,
                           .dtype = x->limits.dtype};
    pl_act_hdr_t tokens = {.kind = PL_ACT_TOKENS, .n_seq = x->limits.max_seq,
                           .n_tokens = x->limits.max_seq};
    bool first = x->p.stage == 0, last = x->p.stage == x->p.n_stages - 1;
    const char *pt = getenv("PL_UCX_PROGRESS_THREAD"); /* "0": progress between layers */
    int hidden_credits =
        PL_MAX(PL_EXEC_MIN_HIDDEN_CREDITS, PL_MIN(x->job.microbatches, PL_EXEC_MAX_HIDDEN_CREDITS));
    pl_status_t st;

    x->out_max = pl_act_size(last ? &tokens : &hidden);
    pl_ucx_set_token(x->ucx, &x->limits.token); /* the grants carry it too */
    pl_ucx_ep_use_credits(x->next, pl_act_tag_credit(x->p.job_id));
    if ((st = pl_ucx_inbox_create(x->ucx, x->prev, pl_act_tag_job(x->p.job_id),
                                  PL_ACT_TAG_DATA_MASK, pl_act_tag_credit(x->p.job_id),
                                  pl_act_size(first ? &tokens : &hidden),
                                  first ? x->job.microbatches : hidden_credits, &x->inbox)))
        return st;
    x->rx.inbox = x->inbox; /* its counts began with the probe's */
    /* One send buffer per credit the next stage's inbox grants (the rule above), and one to
     * compute into while those are in flight. */
    if ((st = pl_ucx_outbox_create(x->ucx, x->next, x->out_max,
                                   (last ? x->job.microbatches : hidden_credits) + 1, &x->outbox)))
        return st;
    if (!(pt && strcmp(pt, "0") == 0) && (st = pl_ucx_progress_start(x->ucx)))
        return st;
    return PL_OK;
}

/* Measure the link to the next stage and answer the previous stage's probe (link_probe.h). */
static pl_status_t s_probe(pl_exec_t *x, const char *next, const char *prev)
{
    pl_probe_result_t r;
    pl_status_t st;
    if (strcmp(prev, next) == 0)
        x->prev = x->next; /* two stages: one endpoint serves both roles */
    else if ((st = pl_ucx_connect(x->ucx, prev, &x->prev)))
        return st;
    x->rx = (pl_act_rx_t){.job = x->p.job_id, .limits = &x->limits,
                          .dropped = x->p.metrics.act_dropped};
    if ((st = pl_probe_run(x->ucx, x->next, x->prev, x->p.job_id, &x->limits.token,
                           (const volatile int *)&x->cancel, &r)))
        return st;
    pl_act_rx_note(&x->rx, PL_ACT_DROP_PROBE, (uint64_t)r.dropped);
    if (!r.ok) {
        pl_log_warn("job %u stage %d: link probe got no answer in %.1f s", x->p.job_id,
                    x->p.stage, r.took_s);
        return PL_OK;
    }
    x->probe = (pl_msg_probe_t){.to_stage = (x->p.stage + 1) % x->p.n_stages, .gbps = r.gbps,
                                .latency_s = r.latency_s, .took_s = r.took_s};
    snprintf(x->probe.transport, sizeof(x->probe.transport), "%s", pl_ucx_ep_transport(x->next));
    x->have_probe = true;
    pl_log_debug("job %u stage %d: link to the next stage %.2f GB/s, %.1f us (%s), probed in "
                 "%.1f ms", x->p.job_id, x->p.stage, r.gbps, r.latency_s * 1e6,
                 pl_ucx_ep_transport(x->next), r.took_s * 1e3);
    return PL_OK;
}

static void *s_thread(void *arg)
{
    pl_exec_t *x = arg;
    pl_gen_sink_t *sink = NULL;
    char *addr = NULL, *next = NULL, *prev = NULL;
    pl_status_t st;
    bool last = x->p.stage == x->p.n_stages - 1;

    pl_msg_t m;
    if ((st = pl_tx_sock_new(x->ctx, PL_TX_PAIR, &x->sock)) ||
        (st = pl_tx_sock_connect(x->sock, x->endpoint))) {
        pl_log_error("job %u stage %d: inproc socket: %s", x->p.job_id, x->p.stage,
                     pl_error_msg());
        pl_tx_sock_destroy(&x->sock);
        return NULL;
    }
    if (x->p.spec.train) { /* a training stage: its own life (train_run.h) */
        pl_train_run_stage(&(pl_train_run_t){
            .job = x->p.job_id, .stage = x->p.stage, .n_stages = x->p.n_stages,
            .first = x->p.first_layer, .last = x->p.last_layer, .train = x->p.spec.train,
            .ops = x->p.train_ops, .sock = x->sock, .cancel = (const volatile int *)&x->cancel,
            .act_dropped = x->p.metrics.act_dropped});
        pl_tx_sock_destroy(&x->sock);
        return NULL;
    }
    if ((st = s_load(x)))
        goto fail;
    if (x->p.n_stages > 1) {
        if ((st = pl_ucx_create(&x->ucx)) || (st = pl_ucx_address(x->ucx, &addr)))
            goto fail;
    }
    pl_msg_init(&m, PL_MSG_READY);
    m.ready.ucx_addr = addr; /* borrowed */
    s_send_main(x, &m);
    if ((st = s_wait_start(x, &next, &prev)))
        goto fail;
    if (x->p.n_stages > 1) {
        if (!next) {
            st = pl_error(PL_ERR_PROTOCOL, "START without the next stage's address");
            goto fail;
        }
        if (!prev) {
            st = pl_error(PL_ERR_PROTOCOL, "START without the previous stage's address");
            goto fail;
        }
        if ((st = pl_ucx_connect(x->ucx, next, &x->next)) || (st = s_probe(x, next, prev)) ||
            (st = s_data_plane(x)))
            goto fail;
    }
    if (last && !x->serve && (st = pl_gen_sink_create(&x->job, x->vocab, &sink)))
        goto fail;
    if (sink)
        pl_gen_sink_set_log(sink, x->log);
    x->sink = sink;
    x->t_start = pl_now();
    pl_log_info("job %u stage %d: running layers %d-%d%s", x->p.job_id, x->p.stage,
                x->p.first_layer, x->p.last_layer,
                x->next ? "" : " (single stage)");
    if (x->serve)
        st = x->p.stage == 0 ? pl_exec_run_serve_first(x)
             : last          ? pl_exec_run_serve_last(x)
                             : pl_exec_run_rest(x, NULL);
    else
        st = x->p.stage == 0 ? pl_exec_run_first(x, sink) : pl_exec_run_rest(x, sink);
    if (!st && x->ucx)
        st = pl_ucx_flush(x->ucx, 10000);
    if (st)
        goto fail;
    pl_msg_init(&m, PL_MSG_DONE);
    s_stats(x, sink, &m.done.stats);
    if (sink && (st = pl_gen_sink_collect(sink, &m.done.results, &m.done.n_results)))
        goto fail;
    if (x->trace && pl_trace_export(x->trace, &m.done.trace)) /* DONE goes without it */
        pl_log_warn("job %u stage %d: trace: %s", x->p.job_id, x->p.stage, pl_error_msg());
    s_send_main(x, &m);
    pl_msg_clear(&m);
    /* Keep the worker and its endpoints until the whole job is over: a peer that still waits
     * for STOP would otherwise see this endpoint close and fail (TCP reports it at once). This
     * stage is done, so a peer that goes from here on is no failure to log. */
    if (x->ucx)
        pl_ucx_expect_close(x->ucx);
    for (double t0 = pl_now(); x->ucx && !atomic_load(&x->cancel) && pl_now() - t0 < S_LINGER_S;) {
        pl_ucx_progress(x->ucx);
        usleep(10 * 1000);
    }
    goto out;
fail:
    if (st != PL_ERR_CANCELED)
        pl_log_error("job %u stage %d: %s", x->p.job_id, x->p.stage,
                     pl_error_msg()[0] ? pl_error_msg() : pl_status_str(st));
    pl_msg_init(&m, PL_MSG_FAIL);
    m.fail.code = st;
    snprintf(m.fail.error, sizeof(m.fail.error), "%s",
             pl_error_msg()[0] ? pl_error_msg() : pl_status_str(st));
    s_send_main(x, &m);
out:
    free(addr);
    free(next);
    free(prev);
    x->sink = NULL;
    pl_gen_sink_destroy(&sink);
    if (x->ucx && x->next)
        pl_ucx_flush(x->ucx, 1000);
    if (x->ucx)
        pl_act_rx_note(&x->rx, PL_ACT_DROP_GRANT, (uint64_t)pl_ucx_grants_dropped(x->ucx));
    pl_ucx_outbox_destroy(&x->outbox);
    pl_ucx_inbox_destroy(&x->inbox);
    x->next = x->prev = NULL; /* closed with the worker */
    pl_ucx_destroy(&x->ucx);
    pl_metrics_add(x->p.metrics.kv_slots, NULL, -x->kv_held);
    x->kv_held = 0;
    pl_exec_serve_free(x);
    pl_be_stage_unload(&x->stage);
    pl_model_destroy(&x->model);
    pl_gen_job_clear(&x->job);
    free(x->tokens);
    free(x->out);
    free(x->in_f32);
    free(x->ints);
    free(x->seqs_in);
    free(x->seqs_out);
    pl_tx_sock_destroy(&x->sock);
    return NULL;
}

pl_status_t pl_exec_start(pl_tx_ctx_t *ctx, pl_exec_params_t *params, pl_exec_t **exec_p)
{
    static atomic_uint s_counter;
    pl_exec_t *x = calloc(1, sizeof(*x));
    pl_status_t st;
    if (!x) {
        pl_job_spec_clear(&params->spec);
        pl_train_ops_destroy(&params->train_ops);
        return pl_error(PL_ERR_NOMEM, "executor: out of memory");
    }
    x->p = *params;
    pl_job_spec_init(&params->spec); /* moved into the exec */
    params->train_ops = NULL;
    params->resume = NULL;
    params->n_resume = 0;
    if (x->p.stage == x->p.n_stages - 1 && x->p.spec.n_prompts > 0 &&
        (st = pl_gen_log_create(x->p.spec.n_prompts, &x->log))) {
        pl_msg_results_free(x->p.resume, x->p.n_resume);
        pl_job_spec_clear(&x->p.spec);
        free(x);
        return st;
    }
    pthread_mutex_init(&x->text_mu, NULL);
    /* the ring lives as long as the exec: the node's thread may read it while the stage runs */
    if (x->p.spec.gen.trace && (st = pl_trace_new(PL_TRACE_MAX_EVENTS, &x->trace)))
        goto err;
    x->ctx = ctx;
    snprintf(x->endpoint, sizeof(x->endpoint), "inproc://exec-%u-%u", x->p.job_id,
             atomic_fetch_add(&s_counter, 1));
    if ((st = pl_tx_sock_new(ctx, PL_TX_PAIR, &x->main_sock)) ||
        (st = pl_tx_sock_bind(x->main_sock, x->endpoint)))
        goto err;
    if (pthread_create(&x->thread, NULL, s_thread, x) != 0) {
        st = pl_error(PL_ERR_NOMEM, "cannot start executor thread");
        goto err;
    }
    *exec_p = x;
    return PL_OK;
err:
    pl_tx_sock_destroy(&x->main_sock);
    pl_trace_destroy(&x->trace);
    pl_train_ops_destroy(&x->p.train_ops);
    pl_job_spec_clear(&x->p.spec);
    pl_msg_results_free(x->p.resume, x->p.n_resume);
    pl_gen_log_destroy(&x->log);
    pthread_mutex_destroy(&x->text_mu);
    free(x);
    return st;
}

pl_tx_sock_t *pl_exec_socket(pl_exec_t *x)
{
    return x->main_sock;
}

uint32_t pl_exec_job(const pl_exec_t *x)
{
    return x->p.job_id;
}

pl_gen_log_t *pl_exec_log(pl_exec_t *x)
{
    return x->log;
}

uint64_t pl_exec_generated(pl_exec_t *x)
{
    return atomic_load(&x->generated);
}

double pl_exec_busy_s(pl_exec_t *x)
{
    return (double)atomic_load(&x->busy_us) * 1e-6;
}

uint64_t pl_exec_seqs_done(pl_exec_t *x)
{
    return atomic_load(&x->freed);
}

size_t pl_exec_text(pl_exec_t *x, size_t from, char *buf, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&x->text_mu);
    if (from < x->text_len) {
        n = PL_MIN(cap, x->text_len - from);
        if (n < x->text_len - from) /* cut before a character that does not fit */
            while (n > 0 && ((unsigned char)x->text[from + n] & 0xC0) == 0x80)
                n--;
        /* the control plane's JSON refuses NUL: the stream stops before one (the results
         * still carry the text) */
        const char *nul = memchr(x->text + from, '\0', n);
        if (nul)
            n = (size_t)(nul - (x->text + from));
        memcpy(buf, x->text + from, n);
    }
    pthread_mutex_unlock(&x->text_mu);
    return n;
}

pl_status_t pl_exec_trace(pl_exec_t *x, pl_msg_trace_t **out_p)
{
    if (!x->trace)
        return pl_error(PL_ERR_NOT_FOUND, "job %u stage %d does not trace", x->p.job_id,
                        x->p.stage);
    return pl_trace_export(x->trace, out_p);
}

int pl_exec_stage(const pl_exec_t *x)
{
    return x->p.stage;
}

bool pl_exec_serves(const pl_exec_t *x)
{
    return x->p.spec.serve.on;
}

void pl_exec_cancel(pl_exec_t *x)
{
    atomic_store(&x->cancel, 1);
}

void pl_exec_destroy(pl_exec_t **exec_p)
{
    pl_exec_t *x = *exec_p;
    if (!x)
        return;
    pl_exec_cancel(x);
    pthread_join(x->thread, NULL);
    pl_tx_sock_destroy(&x->main_sock);
    pl_job_spec_clear(&x->p.spec);
    pl_train_ops_destroy(&x->p.train_ops);
    pl_msg_results_free(x->p.resume, x->p.n_resume);
    pl_gen_log_destroy(&x->log);
    pthread_mutex_destroy(&x->text_mu);
    pl_trace_destroy(&x->trace);
    free(x->text);
    free(x);
    *exec_p = NULL;
}
