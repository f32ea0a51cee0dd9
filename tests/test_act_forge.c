/* The data plane takes only the coordinator's messages: two real stage executors run a job while
 * another process, which learned their worker addresses, sends them forged activation messages
 * (the 52-byte message of the layout before the token, full-size ones with a wrong token, STOP,
 * oversized) and forged credit grants; the job's tokens equal the in-process reference and every
 * forged message is counted as dropped. After a re-plan (a new epoch) the old epoch's token is
 * refused as well. Beside it, with workers in this process: a forged grant adds no credit, and
 * a forged link probe gets no answer. */
#include "common/util.h"
#include "job_util.h"
#include "pipeline/exec.h"
#include "pipeline/gen.h"
#include "pipeline/gen_local.h"
#include "pipeline/link_probe.h"
#include "transport/act_recv.h"
#include "transport/msg.h"
#include "transport/ucx.h"
#include "transport/ucx_grant.h"
#include "ucx_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define S_JOB 7u
#define S_ADDR_MAX 8192

/* What the attacker learns about a running assignment (its addresses, as from a START sniffed
 * in clear text) and what it sends. */
typedef struct {
    uint32_t job, n_seq, max_tokens, dim;
    int have_old;            /* also send messages with an earlier epoch's token */
    pl_act_token_t old;      /* that token */
    char addr[2][S_ADDR_MAX]; /* stage 0's and stage 1's worker addresses */
} s_plan_t;

/* Messages sent to stage 0 and stage 1, by the reason they must be dropped for. */
typedef struct {
    int sent[PL_ACT_DROP_COUNT];
} s_sent_t;

static void s_io(int fd, void *buf, size_t n, bool rd)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = rd ? read(fd, (char *)buf + got, n - got) : write(fd, (char *)buf + got, n - got);
        if (r <= 0)
            _exit(3);
        got += (size_t)r;
    }
}

static void s_send(pl_ucx_t *u, pl_ucx_ep_t *ep, uint64_t tag, void *buf, size_t len,
                   s_sent_t *sent, pl_act_drop_t why)
{
    if (pl_ucx_send(u, ep, tag, buf, len) != PL_OK)
        _exit(4);
    sent->sent[why]++;
}

/* Encode a message of this version (into a malloc'd buffer) under `token`. */
static void *s_encode(pl_act_hdr_t *h, const pl_act_seq_t *seqs, const void *payload,
                      const pl_act_token_t *token, size_t *len)
{
    void *buf = NULL;
    h->token = *token;
    if (pl_act_encode(h, seqs, payload, &buf, len) != PL_OK)
        _exit(5);
    return buf;
}

/* The forged messages of one round, under `token` (a guess, or the old epoch's). */
static void s_forge(pl_ucx_t *u, pl_ucx_ep_t *ep[2], const s_plan_t *p,
                    const pl_act_token_t *token, bool legacy, s_sent_t *sent)
{
    uint32_t n = p->n_seq;
    pl_act_seq_t seqs[64];
    size_t len;
    for (uint32_t i = 0; i < n; i++) /* every sequence "finished", the first holding the rest */
        seqs[i] = (pl_act_seq_t){.seq = i, .pos0 = 0, .n_tok = 1, .flags = PL_ACT_FINISHED,
                                 .token = 2};
    if (legacy) {
        /* the issue's message: 52 bytes of the layout before the token (32-byte header, one
         * entry), a TOKENS message that marks sequence 0 finished; to both stages */
        for (int s = 0; s < 2; s++) {
            unsigned char *b = calloc(1, 52);
            uint32_t hdr[8] = {PL_ACT_MAGIC, 2u | (PL_ACT_TOKENS << 16), p->job, 0, 1, 1, 1, 0};
            uint32_t ent[5] = {0, 1, 1, PL_ACT_FINISHED, 2};
            memcpy(b, hdr, 32); /* little-endian host */
            memcpy(b + 32, ent, 20);
            s_send(u, ep[s], pl_act_tag(p->job, PL_ACT_TOKENS, 0, 1), b, 52, sent,
                   PL_ACT_DROP_MALFORMED);
        }
    }
    /* stage 0: a full-size TOKENS message ending every sequence */
    pl_act_hdr_t h = {.kind = PL_ACT_TOKENS, .job = p->job, .step = 1, .n_seq = n, .n_tokens = n};
    void *b = s_encode(&h, seqs, NULL, token, &len);
    s_send(u, ep[0], pl_act_tag(p->job, PL_ACT_TOKENS, 0, 1), b, len, sent, PL_ACT_DROP_TOKEN);
    /* stage 1: a full-size hidden message (the largest its slots take), then STOP */
    seqs[0].n_tok = p->max_tokens - (n - 1);
    for (uint32_t i = 0; i < n; i++)
        seqs[i].flags = 0;
    float *x = calloc((size_t)p->max_tokens * p->dim, sizeof(float));
    for (size_t i = 0; i < (size_t)p->max_tokens * p->dim; i++)
        x[i] = 1e4f;
    h = (pl_act_hdr_t){.kind = PL_ACT_HIDDEN, .job = p->job, .step = 0, .n_seq = n,
                       .n_tokens = p->max_tokens, .dim = p->dim};
    b = s_encode(&h, seqs, x, token, &len);
    free(x);
    s_send(u, ep[1], pl_act_tag(p->job, PL_ACT_HIDDEN, 0, 0), b, len, sent, PL_ACT_DROP_TOKEN);
    if (legacy) { /* one byte more than a slot holds (slots are rounded up to 64 bytes) */
        size_t big = (len + 63) / 64 * 64 + 1;
        s_send(u, ep[1], pl_act_tag(p->job, PL_ACT_HIDDEN, 1, 0), calloc(1, big), big, sent,
               PL_ACT_DROP_OVERSIZE);
    }
    h = (pl_act_hdr_t){.kind = PL_ACT_STOP, .job = p->job};
    b = s_encode(&h, NULL, NULL, token, &len);
    s_send(u, ep[1], pl_act_tag(p->job, PL_ACT_STOP, 0, 0), b, len, sent, PL_ACT_DROP_TOKEN);
    /* both stages send with credits: a grant of many credits under the token, and (once) one
     * of the layout before the token */
    for (int s = 0; s < 2; s++) {
        unsigned char *g = malloc(PL_UCX_GRANT_BYTES);
        pl_ucx_grant_encode(60, token, g);
        s_send(u, ep[s], pl_act_tag_credit(p->job), g, PL_UCX_GRANT_BYTES, sent,
               PL_ACT_DROP_GRANT);
        if (legacy) {
            uint32_t old_grant[2] = {0x31434c50u, 60}; /* "PLC1", credits */
            g = malloc(sizeof(old_grant));
            memcpy(g, old_grant, sizeof(old_grant));
            s_send(u, ep[s], pl_act_tag_credit(p->job), g, sizeof(old_grant), sent,
                   PL_ACT_DROP_GRANT);
        }
    }
}

/* The attacking process: for each plan, connect to both stages, wait for "go", send, report. */
static void s_attacker(int in, int out)
{
    for (;;) {
        s_plan_t p;
        pl_ucx_t *u = NULL;
        pl_ucx_ep_t *ep[2];
        s_sent_t sent = {0};
        char c;
        s_io(in, &p, sizeof(p), true);
        if (p.job == 0)
            _exit(0);
        if (pl_ucx_create(&u) || pl_ucx_connect(u, p.addr[0], &ep[0]) ||
            pl_ucx_connect(u, p.addr[1], &ep[1]))
            _exit(6);
        s_io(out, "c", 1, false);
        s_io(in, &c, 1, true); /* go: the job is under way */
        pl_act_token_t guess;
        if (pl_act_token_new(&guess))
            _exit(7);
        s_forge(u, ep, &p, &guess, true, &sent);
        if (p.have_old)
            s_forge(u, ep, &p, &p.old, false, &sent);
        if (pl_ucx_flush(u, 10000))
            _exit(8);
        s_io(out, &sent, sizeof(sent), false);
        s_io(in, &c, 1, true); /* the job is over: let go */
        pl_ucx_destroy(&u);
    }
}

static char s_dir[256], s_model[300];
static pid_t s_pid;
static int s_to, s_from;

static void s_setup(void)
{
    int a[2], b[2];
    tc_mkdtemp(s_dir, sizeof(s_dir));
    snprintf(s_model, sizeof(s_model), "%s/m", s_dir);
    cr_assert_eq(tc_make_model(s_dir, "m", "--layers 4 --hidden 64 --intermediate 128 "
                                           "--heads 4 --kv-heads 2 --vocab 256 --seed 11"),
                 0);
    /* the attacker is forked before this process has threads or a UCX context */
    cr_assert_eq(pipe(a), 0);
    cr_assert_eq(pipe(b), 0);
    s_pid = fork();
    cr_assert_geq(s_pid, 0);
    if (s_pid == 0) {
        close(a[1]);
        close(b[0]);
        s_attacker(a[0], b[1]);
    }
    close(a[0]);
    close(b[1]);
    s_to = a[1];
    s_from = b[0];
}

static void s_teardown(void)
{
    s_plan_t end = {0};
    s_io(s_to, &end, sizeof(end), false);
    int status = 0;
    waitpid(s_pid, &status, 0);
    close(s_to);
    close(s_from);
    tc_sh(NULL, "rm -rf %s", s_dir);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "attacker status %d", status);
}

static void s_spec(pl_job_spec_t *spec, const char *model)
{
    json_t *body = json_pack("{s:s, s:{s:[[i,i,i],[i,i],[i,i,i,i,i],[i]], s:i, s:b}, s:i}",
                             "model", model, "gen", "prompts", 1, 15, 27, 1, 7, 1, 100, 101,
                             102, 103, 250, "max_new_tokens", 160, "stop_at_eos", 0,
                             "microbatches", 2);
    cr_assert_eq(pl_job_spec_decode(body, spec), PL_OK, "%s", pl_error_msg());
    json_decref(body);
}

/* The next message from an executor (READY, DONE or FAIL). */
static void s_expect(pl_exec_t *x, pl_msg_type_t type, pl_msg_t *m)
{
    pl_status_t st = pl_tx_recv(pl_exec_socket(x), 30000, NULL, NULL, m);
    cr_assert_eq(st, PL_OK, "stage %d: %s", pl_exec_stage(x), pl_error_msg());
    cr_assert_eq(m->type, type, "stage %d: %s (%s)", pl_exec_stage(x), pl_msg_name(m->type),
                 m->type == PL_MSG_FAIL ? m->fail.error : "");
}

/* The value of pipeld_act_dropped_total{reason="R"} in the registry's text. */
static long s_dropped(pl_metrics_t *r, const char *reason)
{
    char *text, want[96];
    size_t len;
    cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
    snprintf(want, sizeof(want), "pipeld_act_dropped_total{reason=\"%s\"} ", reason);
    const char *at = strstr(text, want);
    long v = at ? strtol(at + strlen(want), NULL, 10) : -1;
    free(text);
    return v;
}

/* One assignment of the job on two stages (layers 0-1 and 2-3) under `token`, attacked midway
 * with the plan's messages; its results' token arrays (caller frees) and what was sent. */
static json_t *s_run(pl_metric_t *dropped, const pl_act_token_t *token,
                     const pl_act_token_t *old, uint32_t epoch, s_sent_t *sent)
{
    pl_tx_ctx_t *ctx;
    pl_be_device_t *dev[2];
    pl_exec_t *x[2];
    pl_msg_t m;
    pl_gen_job_t job;
    pl_model_t *model;
    s_plan_t plan = {.job = S_JOB, .have_old = old != NULL};
    cr_assert_eq(pl_tx_ctx_new(&ctx), PL_OK);
    for (int s = 0; s < 2; s++) /* a device each, as two nodes would have */
        cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev[s]), PL_OK);
    cr_assert_eq(pl_model_open(s_model, &model), PL_OK, "%s", pl_error_msg());
    pl_job_spec_t spec;
    s_spec(&spec, s_model);
    cr_assert_eq(pl_gen_job_from_spec(&spec, 2, pl_model_config(model), &job), PL_OK);
    plan.n_seq = (uint32_t)job.n_seqs;
    plan.max_tokens = (uint32_t)pl_gen_job_max_tokens(&job);
    plan.dim = (uint32_t)pl_model_config(model)->hidden;
    if (old)
        plan.old = *old;
    for (int s = 0; s < 2; s++) {
        pl_exec_params_t p = {.job_id = S_JOB, .stage = s, .n_stages = 2,
                              .first_layer = 2 * s, .last_layer = 2 * s + 1,
                              .microbatches = 2, .max_ctx = pl_gen_job_max_ctx(&job),
                              .max_tokens = pl_gen_job_max_tokens(&job), .dev = dev[s],
                              .threads = 1, .metrics = {.act_dropped = dropped}};
        s_spec(&p.spec, s_model);
        cr_assert_eq(pl_exec_start(ctx, &p, &x[s]), PL_OK, "%s", pl_error_msg());
    }
    pl_gen_job_clear(&job);
    pl_model_destroy(&model);
    pl_job_spec_clear(&spec);
    char *addr[2];
    for (int s = 0; s < 2; s++) {
        s_expect(x[s], PL_MSG_READY, &m);
        cr_assert_not_null(m.ready.ucx_addr);
        cr_assert_lt(strlen(m.ready.ucx_addr), S_ADDR_MAX);
        snprintf(plan.addr[s], S_ADDR_MAX, "%s", m.ready.ucx_addr);
        addr[s] = m.ready.ucx_addr;
        m.ready.ucx_addr = NULL;
        pl_msg_clear(&m);
    }
    /* the attacker connects before the job starts, as one would that watched START */
    char c;
    s_io(s_to, &plan, sizeof(plan), false);
    s_io(s_from, &c, 1, true);
    for (int s = 0; s < 2; s++) {
        pl_msg_init(&m, PL_MSG_START);
        m.start = (pl_msg_start_t){.job = S_JOB, .stage = s, .epoch = epoch,
                                   .next = addr[1 - s], .prev = addr[1 - s], .token = *token};
        cr_assert_eq(pl_tx_send(pl_exec_socket(x[s]), NULL, &m), PL_OK);
    }
    free(addr[0]);
    free(addr[1]);
    /* midway: the last stage has sampled some tokens, and far from all (4 x 160) */
    double t0 = pl_now();
    while (pl_exec_generated(x[1]) < 20 && pl_now() - t0 < 60)
        usleep(1000);
    uint64_t at_attack = pl_exec_generated(x[1]);
    s_io(s_to, "g", 1, false);
    s_io(s_from, sent, sizeof(*sent), true);
    cr_assert_lt(at_attack, 4 * 160, "the job was over before the attack");
    /* both stages finish, stage 0's DONE first or not */
    json_t *tokens = NULL;
    int64_t dropped_seen = 0;
    for (int s = 0; s < 2; s++) {
        s_expect(x[s], PL_MSG_DONE, &m);
        cr_assert(m.done.stats.has_data_plane);
        dropped_seen += m.done.stats.data_plane.dropped;
        if (s == 1) {
            json_t *arr;
            cr_assert_eq(m.done.n_results, 4);
            cr_assert_eq(pl_msg_results_encode(m.done.results, m.done.n_results, &arr), PL_OK);
            tokens = json_array();
            for (size_t i = 0; i < json_array_size(arr); i++)
                json_array_append(tokens, json_object_get(json_array_get(arr, i), "tokens"));
            json_decref(arr);
        }
        pl_msg_clear(&m);
    }
    s_io(s_to, "b", 1, false);
    int all = 0;
    for (int i = 0; i < PL_ACT_DROP_COUNT; i++)
        all += sent->sent[i];
    cr_assert_eq(dropped_seen, all, "the stages dropped %lld of the %d forged messages",
                 (long long)dropped_seen, all);
    pl_exec_destroy(&x[0]);
    pl_exec_destroy(&x[1]);
    pl_be_device_close(&dev[0]);
    pl_be_device_close(&dev[1]);
    pl_tx_ctx_destroy(&ctx);
    return tokens;
}

/* The in-process reference's token arrays. */
static json_t *s_reference(void)
{
    pl_job_spec_t spec;
    json_t *res = NULL, *tokens = json_array();
    pl_gen_local_stats_t stats;
    pl_be_device_t *dev;
    s_spec(&spec, s_model);
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    cr_assert_eq(pl_gen_local_run(s_model, &spec, dev, NULL, 1, &res, &stats), PL_OK, "%s",
                 pl_error_msg());
    for (size_t i = 0; i < json_array_size(res); i++)
        json_array_append(tokens, json_object_get(json_array_get(res, i), "tokens"));
    cr_assert_eq(stats.generated, 4 * 160);
    json_decref(res);
    pl_job_spec_clear(&spec);
    pl_be_device_close(&dev);
    return tokens;
}

static void s_assert_same(json_t *a, json_t *b, const char *what)
{
    char *sa = json_dumps(a, JSON_COMPACT), *sb = json_dumps(b, JSON_COMPACT);
    cr_assert_str_eq(sa, sb, "%s", what);
    free(sa);
    free(sb);
}

TestSuite(act_forge, .init = s_setup, .fini = s_teardown, .timeout = 180);

Test(act_forge, forged_messages_mid_job_are_dropped_and_counted)
{
    pl_metrics_t *reg;
    pl_metric_t *dropped;
    pl_act_token_t t1, t2;
    s_sent_t sent1, sent2;
    cr_assert_eq(pl_metrics_new(&reg), PL_OK);
    cr_assert_eq(pl_metrics_counter(reg, "pipeld_act_dropped_total", "dropped", "reason",
                                    &dropped),
                 PL_OK);
    cr_assert_eq(pl_act_token_new(&t1), PL_OK);
    cr_assert_eq(pl_act_token_new(&t2), PL_OK);
    json_t *want = s_reference();

    /* epoch 1: guessed tokens and the layout before the token */
    json_t *got = s_run(dropped, &t1, NULL, 1, &sent1);
    s_assert_same(got, want, "epoch 1's tokens under attack");
    json_decref(got);
    cr_assert_eq(sent1.sent[PL_ACT_DROP_MALFORMED], 2);
    cr_assert_eq(sent1.sent[PL_ACT_DROP_OVERSIZE], 1);
    cr_assert_eq(sent1.sent[PL_ACT_DROP_TOKEN], 3);
    cr_assert_eq(sent1.sent[PL_ACT_DROP_GRANT], 4);
    cr_assert_eq(s_dropped(reg, "malformed"), 2);
    cr_assert_eq(s_dropped(reg, "oversize"), 1);
    cr_assert_eq(s_dropped(reg, "token"), 3);
    cr_assert_eq(s_dropped(reg, "grant"), 4);
    cr_assert_eq(s_dropped(reg, "probe"), 0);

    /* a re-plan: epoch 2 has its own token, and epoch 1's is one more wrong token */
    got = s_run(dropped, &t2, &t1, 2, &sent2);
    s_assert_same(got, want, "epoch 2's tokens under attack with epoch 1's token");
    json_decref(got);
    cr_assert_eq(sent2.sent[PL_ACT_DROP_TOKEN], 6);
    cr_assert_eq(sent2.sent[PL_ACT_DROP_GRANT], 4 + 2);
    cr_assert_eq(s_dropped(reg, "token"), 3 + 6);
    cr_assert_eq(s_dropped(reg, "grant"), 4 + 6);
    cr_assert_eq(s_dropped(reg, "malformed"), 2 + 2);
    cr_assert_eq(s_dropped(reg, "oversize"), 1 + 1);
    json_decref(want);
    pl_metrics_destroy(&reg);
}

/* ---- grants and probes, with workers in this process ---- */

static void s_send_grant(pl_ucx_t *u, pl_ucx_ep_t *ep, uint32_t credits, const pl_act_token_t *t)
{
    unsigned char *g = malloc(PL_UCX_GRANT_BYTES);
    pl_ucx_grant_encode(credits, t, g);
    cr_assert_eq(pl_ucx_send(u, ep, pl_act_tag_credit(S_JOB), g, PL_UCX_GRANT_BYTES), PL_OK);
    cr_assert_eq(pl_ucx_flush(u, 5000), PL_OK);
}

/* A sender whose worker has the job's token waits for a credit; grants under other tokens (and
 * the all-zero one, a worker's default) give it none, one under the token gives what it says. */
Test(act_forge_link, a_forged_grant_adds_no_credit)
{
    pl_ucx_t *a, *f;
    pl_act_token_t t, guess, zero = {{0}};
    cr_assert_eq(pl_act_token_new(&t), PL_OK);
    cr_assert_eq(pl_act_token_new(&guess), PL_OK);
    cr_assert_eq(pl_ucx_create(&a), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_create(&f), PL_OK, "%s", pl_error_msg());
    pl_ucx_set_token(a, &t);
    pl_ucx_ep_t *af = tu_connect(a, f), *fa = tu_connect(f, a);
    pl_ucx_ep_use_credits(af, pl_act_tag_credit(S_JOB));
    s_send_grant(f, fa, 50, &guess);
    s_send_grant(f, fa, 50, &zero);
    pl_status_t st = pl_ucx_send_credited(a, af, pl_act_tag(S_JOB, PL_ACT_HIDDEN, 0, 0),
                                          calloc(1, 64), 64, 500, NULL);
    cr_assert_eq(st, PL_ERR_TIMEOUT, "a forged grant gave a credit: %s", pl_error_msg());
    cr_assert_eq(pl_ucx_grants_dropped(a), 2);
    pl_ucx_credit_stats_t cs;
    pl_ucx_ep_credit_stats(af, &cs);
    cr_assert_eq(cs.granted, 0);
    /* the job's token: two credits, two sends, and the third waits again */
    s_send_grant(f, fa, 2, &t);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pl_ucx_send_credited(a, af, pl_act_tag(S_JOB, PL_ACT_HIDDEN, 0, 0),
                                          calloc(1, 64), 64, 5000, NULL),
                     PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_send_credited(a, af, pl_act_tag(S_JOB, PL_ACT_HIDDEN, 0, 0),
                                      calloc(1, 64), 64, 300, NULL),
                 PL_ERR_TIMEOUT);
    pl_ucx_ep_credit_stats(af, &cs);
    cr_assert_eq(cs.granted, 2);
    cr_assert_eq(pl_ucx_grants_dropped(a), 2);
    pl_ucx_destroy(&a);
    pl_ucx_destroy(&f);
}

typedef struct {
    pl_ucx_t *u;
    pl_ucx_ep_t *ep;
    pl_act_token_t token;
    pl_probe_result_t r;
    pl_status_t st;
} s_prober_t;

static void *s_prober(void *arg)
{
    s_prober_t *p = arg;
    p->st = pl_probe_run(p->u, p->ep, p->ep, S_JOB, &p->token, NULL, &p->r);
    return NULL;
}

/* A probe message of `type` (link_probe.c: 0 ping, 1 pong) and seq, of len bytes starting with
 * `token` (NULL: filler only). */
static void s_send_probe(pl_ucx_t *u, pl_ucx_ep_t *ep, uint32_t type, uint32_t seq, size_t len,
                         const pl_act_token_t *token)
{
    unsigned char *b = malloc(len);
    memset(b, 0x5a, len);
    if (token)
        memcpy(b, token->b, PL_ACT_TOKEN_BYTES);
    cr_assert_eq(pl_ucx_send(u, ep, pl_act_probe_tag(S_JOB, type, seq), b, len), PL_OK);
}

/* A stage probing its link answers pings that carry the job's token, and only those: forged
 * pings (another token, the layout before the token, a message longer than any probe) are
 * counted and get no pong. */
Test(act_forge_link, a_forged_probe_gets_no_answer)
{
    s_prober_t p = {0};
    pl_ucx_t *f;
    pl_act_token_t guess;
    cr_assert_eq(pl_act_token_new(&p.token), PL_OK);
    cr_assert_eq(pl_act_token_new(&guess), PL_OK);
    cr_assert_eq(pl_ucx_create(&p.u), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_create(&f), PL_OK, "%s", pl_error_msg());
    p.ep = tu_connect(p.u, f);
    pl_ucx_ep_t *fp = tu_connect(f, p.u);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_prober, &p), 0);
    s_send_probe(f, fp, 0, 1, PL_ACT_TOKEN_BYTES, &guess);
    s_send_probe(f, fp, 0, 2, 8, NULL);
    s_send_probe(f, fp, 0, 3, PL_PROBE_MAX_BYTES + 1, &p.token);
    s_send_probe(f, fp, 1, 0, PL_ACT_TOKEN_BYTES, &guess); /* a forged pong to its own ping */
    s_send_probe(f, fp, 0, 4, PL_ACT_TOKEN_BYTES, &p.token);
    /* what the prober sends: its own pings (never answered here) and its pongs */
    int pongs = 0, pong_seq = -1;
    double t0 = pl_now();
    while (pl_now() - t0 < 8) {
        void *buf = NULL;
        size_t len;
        uint64_t tag;
        uint32_t type, seq;
        pl_status_t st = pl_ucx_recv(f, pl_act_probe_tag(S_JOB, 0, 0), PL_ACT_TAG_PROBE_MASK,
                                     PL_PROBE_MAX_BYTES, &buf, &len, &tag, 200, NULL);
        if (st == PL_ERR_TIMEOUT) {
            pl_error_clear();
            continue;
        }
        cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
        cr_assert(pl_act_probe_tag_decode(tag, &type, &seq));
        cr_assert_geq(len, PL_ACT_TOKEN_BYTES);
        cr_assert(memcmp(buf, p.token.b, PL_ACT_TOKEN_BYTES) == 0, "a probe without the token");
        free(buf);
        if (type == 1) {
            pongs++;
            pong_seq = (int)seq;
        }
    }
    pthread_join(th, NULL);
    cr_assert_eq(p.st, PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pongs, 1, "%d pongs", pongs);
    cr_assert_eq(pong_seq, 4, "the pong answered ping %d", pong_seq);
    cr_assert(!p.r.ok, "nobody answered its pings, yet it measured the link");
    cr_assert_eq(p.r.dropped, 4);
    pl_ucx_destroy(&p.u);
    pl_ucx_destroy(&f);
}
