/* pipectl: submit and watch jobs, plan them (on the live cluster or a described one), list
 * nodes, ask a node's health. Tables by default, -o json for scripts; exit 0 on success,
 * non-zero with a one-line error otherwise. */
#include "common/config.h"
#include "common/util.h"
#include "pipeline/gen.h"
#include "scheduler/catalog.h"
#include "scheduler/inputs.h"
#include "scheduler/modes.h"
#include "scheduler/whatif.h"
#include "transport/keys.h"
#include "tools/pipectl/pipectl.h"
#include "tools/pipectl/trace.h"
#include "transport/sock.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef pl_pipectl_t s_ctl_t;

static int s_die(const char *fmt, const char *a)
{
    fprintf(stderr, "pipectl: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 1;
}

/* One request, one answer. *reply_p is the REPLY body; an ERROR answer is printed and fails. */
static int s_call(s_ctl_t *c, const pl_msg_t *req, json_t **reply_p)
{
    pl_msg_t m;
    pl_status_t st = pl_tx_send(c->sock, NULL, req);
    if (st)
        return s_die("cannot send to the coordinator: %s", pl_error_msg());
    st = pl_tx_recv(c->sock, (int)(c->timeout_s * 1000), NULL, NULL, &m);
    if (st == PL_ERR_BUSY) {
        char why[256];
        if (pl_tx_sock_handshake_error(c->sock, why, sizeof(why)))
            fprintf(stderr, "pipectl: not admitted: %s\n", why);
        else
            fprintf(stderr, "pipectl: no answer from the coordinator at %s within %.0f s\n",
                    c->endpoint, c->timeout_s);
        return 1;
    }
    if (st)
        return s_die("bad answer from the coordinator: %s", pl_error_msg());
    if (m.type == PL_MSG_ERROR) {
        fprintf(stderr, "pipectl: %s\n",
                m.error.message[0] ? m.error.message : "the coordinator refused");
        pl_msg_clear(&m);
        return 1;
    }
    if (m.type != PL_MSG_REPLY) {
        pl_msg_clear(&m);
        return s_die("unexpected answer %s", pl_msg_name(m.type));
    }
    *reply_p = m.reply.body; /* taken */
    m.reply.body = NULL;
    return 0;
}

int pl_pipectl_call(pl_pipectl_t *c, const pl_msg_t *req, json_t **reply_p)
{
    return s_call(c, req, reply_p);
}

/* A query about one job (STATUS, RESULTS, KILL). */
static int s_call_job(s_ctl_t *c, pl_msg_type_t type, int64_t id, json_t **reply_p)
{
    pl_msg_t m;
    pl_msg_init(&m, type);
    m.job_ref.job = (uint32_t)id;
    return s_call(c, &m, reply_p);
}

static void s_print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
        puts(s);
    free(s);
}

static int64_t s_job_id(const char *arg)
{
    char *end;
    long long v = strtoll(arg, &end, 10);
    return (*arg && !*end && v > 0 && v <= UINT32_MAX) ? v : -1;
}

static const char *s_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

static double s_num(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

/* A duration as the plan table writes it; "-" when not measured. */
static const char *s_dur(double v, char *b, size_t n)
{
    if (v <= 0)
        snprintf(b, n, "-");
    else
        pl_sched_fmt_time(v, b, n);
    return b;
}

static void s_print_plan(const json_t *plan)
{
    if (!json_is_object(plan))
        return;
    printf("planner: %s\n%s", s_str(plan, "planner"), s_str(plan, "table"));
}

/* Each stage's measured compute per call beside the plan's prediction (same device, same
 * microbatch), and the whole job's compute of the stage: calls x predicted vs measured. */
static void s_print_measured(const json_t *r)
{
    json_t *ps = json_object_get(json_object_get(r, "plan"), "stages");
    json_t *ss = json_object_get(r, "stages");
    bool any = false;
    for (size_t i = 0; i < json_array_size(ss); i++) {
        const json_t *p = json_array_get(ps, i);
        pl_msg_stats_t st; /* DONE's statistics, as the coordinator passes them on */
        if (!json_is_object(p) ||
            pl_msg_stats_decode(json_object_get(json_array_get(ss, i), "stats"), &st))
            continue;
        if (!any)
            printf("%-5s %-12s %-21s %-21s %-23s %s\n", "stage", "node",
                   "prefill/call pred", "decode/call pred", "stage compute pred", "link measured");
        any = true;
        char a[24], b[24], c[24], d[24], e[24], f[24], link[96] = "-";
        double np = (double)st.prefill_calls, nd = (double)st.decode_calls;
        double pp = s_num(p, "compute_prefill_s"), pd = s_num(p, "compute_decode_s");
        double mp = np > 0 ? st.prefill_compute_s / np : 0;
        double md = nd > 0 ? st.decode_compute_s / nd : 0;
        double pt = np * pp + nd * pd, mt = st.compute_s;
        if (st.has_probe)
            snprintf(link, sizeof(link), "%.2f GB/s, %.1f us (%s)", st.probe.gbps,
                     st.probe.latency_s * 1e6, st.probe.transport);
        printf("%-5zu %-12.12s %9s / %-9s %9s / %-9s %9s / %-10s %+4.0f%%  %s\n", i,
               s_str(p, "node"), s_dur(pp, a, sizeof(a)), s_dur(mp, b, sizeof(b)),
               s_dur(pd, c, sizeof(c)), s_dur(md, d, sizeof(d)), s_dur(pt, e, sizeof(e)),
               s_dur(mt, f, sizeof(f)), pt > 0 ? 100.0 * (mt / pt - 1.0) : 0.0, link);
    }
    if (any)
        printf("(each pair: predicted / measured; the percentage is the stage's measured "
               "compute over the prediction)\n");
    const json_t *p = json_object_get(r, "plan"), *t = json_object_get(r, "throughput");
    if (json_is_object(p) && json_is_object(t))
        printf("predicted: prefill %.1f tok/s, decode %.1f tok/s, job %.3f s | measured: prefill "
               "%.1f tok/s, decode %.1f tok/s, job %.3f s\n",
               s_num(p, "prefill_tok_s"), s_num(p, "decode_tok_s"), s_num(p, "job_time_s"),
               s_num(t, "prefill_tok_s"), s_num(t, "decode_tok_s"), s_num(t, "wall_s"));
}

/* Bytes with a binary unit ("512 B", "1.50 MiB"); returns b. */
static const char *s_bytes(double v, char *b, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    for (; v >= 1024 && k < 4; k++)
        v /= 1024;
    snprintf(b, n, k ? "%.2f %s" : "%.0f %s", v, u[k]);
    return b;
}

/* Each stage's data plane as its stats carry it: the link's UCX transports, the wire dtype, the
 * bytes sent, the receive slots, the credits granted to it, the most sends in flight, and the
 * memory bound of its slots and send buffers. */
static void s_print_data_plane(const json_t *r)
{
    json_t *ss = json_object_get(r, "stages");
    bool any = false;
    for (size_t i = 0; i < json_array_size(ss); i++) {
        const json_t *st = json_object_get(json_array_get(ss, i), "stats");
        const json_t *dp = json_object_get(st, "data_plane");
        if (!json_is_object(dp))
            continue;
        if (!any)
            printf("%-5s %-16s %-5s %-11s %-17s %-7s %-9s %-11s %s\n", "stage", "link (UCX)",
                   "wire", "sent", "recv slots", "credits", "in flight", "mem bound", "progress");
        any = true;
        char sent[24], slot_b[24], bound[24], slots[40];
        snprintf(slots, sizeof(slots), "%d (%s)", (int)s_num(dp, "inbox_slots"),
                 s_bytes(s_num(dp, "inbox_bytes"), slot_b, sizeof(slot_b)));
        printf("%-5zu %-16.16s %-5s %-11s %-17s %-7d %-9d %-11s %s\n", i, s_str(st, "link"),
               s_str(st, "wire_dtype"), s_bytes(s_num(st, "bytes_sent"), sent, sizeof(sent)), slots,
               (int)s_num(dp, "send_credits"), (int)s_num(dp, "max_in_flight"),
               s_bytes(s_num(dp, "bound_bytes"), bound, sizeof(bound)),
               json_is_true(json_object_get(dp, "progress_thread")) ? "thread" : "in calls");
    }
}

static void s_print_throughput(FILE *f, const json_t *t)
{
    if (!json_is_object(t))
        return;
    fprintf(f,
            "throughput: %d prompt tokens, %d generated in %.3f s | prefill %.1f tok/s | "
            "decode %.1f tok/s | overall %.1f tok/s\n",
            (int)s_num(t, "prompt_tokens"), (int)s_num(t, "generated_tokens"), s_num(t, "wall_s"),
            s_num(t, "prefill_tok_s"), s_num(t, "decode_tok_s"), s_num(t, "tok_s"));
}

static int s_status(s_ctl_t *c, int64_t id)
{
    json_t *r;
    if (s_call_job(c, PL_MSG_STATUS, id, &r))
        return 1;
    if (c->json) {
        s_print_json(r);
    } else {
        printf("job %lld: %s  (%d sequences, %.2f s)\n", (long long)id, s_str(r, "state"),
               (int)s_num(r, "sequences"), s_num(r, "elapsed_s"));
        printf("model: %s\n", s_str(r, "model"));
        if (*s_str(r, "note") && strcmp(s_str(r, "note"), "-"))
            printf("note: %s\n", s_str(r, "note"));
        s_print_plan(json_object_get(r, "plan"));
        s_print_measured(r);
        s_print_data_plane(r);
        s_print_throughput(stdout, json_object_get(r, "throughput"));
    }
    json_decref(r);
    return 0;
}

static int s_results(s_ctl_t *c, int64_t id)
{
    json_t *r, *arr = NULL, *e;
    pl_msg_results_reply_t res = {0};
    size_t i;
    if (s_call_job(c, PL_MSG_RESULTS, id, &r))
        return 1;
    if (c->json) {
        s_print_json(r);
        json_decref(r);
        return 0;
    }
    pl_status_t st = pl_msg_results_reply_decode(r, &res);
    json_decref(r);
    if (st || (st = pl_msg_results_encode(res.results, res.n_results, &arr))) {
        pl_msg_results_reply_clear(&res);
        return s_die("bad results from the coordinator: %s", pl_error_msg());
    }
    json_array_foreach(arr, i, e)
    {
        const pl_msg_result_t *q = &res.results[i];
        if (q->text) { /* a text job: the completions, each under a line naming it */
            if (res.n_results > 1)
                printf("%s### seq %d (%s)\n", i ? "\n" : "", q->seq,
                       json_string_value(json_object_get(e, "finish")));
            fputs(q->text, stdout);
            if (!*q->text || q->text[strlen(q->text) - 1] != '\n')
                putchar('\n');
            continue;
        }
        char *line = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER); /* JSONL in prompt order */
        puts(line ? line : "{}");
        free(line);
    }
    s_print_throughput(stderr, res.throughput);
    json_decref(arr);
    pl_msg_results_reply_clear(&res);
    return 0;
}

static int s_wait(s_ctl_t *c, int64_t id)
{
    char last[32] = "";
    double t0 = pl_now(), shown_at = 0;
    int64_t shown = 0;
    for (;;) {
        json_t *r;
        if (s_call_job(c, PL_MSG_STATUS, id, &r))
            return 1;
        char state[32];
        snprintf(state, sizeof(state), "%s", s_str(r, "state"));
        if (strcmp(state, last)) {
            const char *note = s_str(r, "note");
            fprintf(stderr, "pipectl: job %lld %s after %.1f s%s%s\n", (long long)id, state,
                    pl_now() - t0, strcmp(note, "-") && *note ? ": " : "",
                    strcmp(note, "-") ? note : "");
            snprintf(last, sizeof(last), "%s", state);
        }
        /* long generations: the token count every few seconds while it grows */
        json_t *pg = json_object_get(r, "progress");
        int64_t gen = (int64_t)s_num(pg, "generated");
        if (!strcmp(state, "running") && gen > shown && pl_now() - shown_at >= 2.0) {
            fprintf(stderr, "pipectl: job %lld running: %lld of at most %lld tokens after %.1f s\n",
                    (long long)id, (long long)gen, (long long)s_num(pg, "at_most"),
                    pl_now() - t0);
            shown = gen;
            shown_at = pl_now();
        }
        json_decref(r);
        if (!strcmp(state, "done"))
            return s_results(c, id);
        if (!strcmp(state, "failed") || !strcmp(state, "canceled"))
            return 1;
        usleep(100 * 1000);
    }
}

/* The SUBMIT / PLAN request of a job file: its typed spec, --stages overriding the file's. */
static int s_job_msg(const char *path, int stages, pl_msg_type_t type, pl_msg_t *m)
{
    static pl_cfg_job_t job;
    pl_msg_init(m, type);
    if (pl_cfg_job_load(path, &job) || pl_gen_spec_from_file(&job, &m->submit))
        return s_die("%s", pl_error_msg());
    if (stages >= 0)
        m->submit.stages = stages;
    return 0;
}

static int s_submit(s_ctl_t *c, const char *path, bool wait, int stages)
{
    pl_msg_t *m = malloc(sizeof(*m));
    json_t *r;
    pl_msg_job_state_t js;
    int rc = !m || s_job_msg(path, stages, PL_MSG_SUBMIT, m) || s_call(c, m, &r);
    if (m)
        pl_msg_clear(m);
    free(m);
    if (rc)
        return 1;
    if (pl_msg_job_state_decode(r, &js)) {
        json_decref(r);
        return s_die("bad answer to SUBMIT: %s", pl_error_msg());
    }
    if (c->json && !wait)
        s_print_json(r);
    else
        fprintf(wait ? stderr : stdout, "job %u submitted\n", js.job);
    json_decref(r);
    return wait ? s_wait(c, js.job) : 0;
}

/* A plan reply {"plan", "note", "busy"} as a table, or as it is with -o json. */
static int s_show_plan(const s_ctl_t *c, json_t *r)
{
    size_t i;
    json_t *b;
    if (c->json) {
        s_print_json(r);
        return 0;
    }
    s_print_plan(json_object_get(r, "plan"));
    const char *note = s_str(r, "note");
    if (*note && strcmp(note, "-"))
        printf("note: %s\n", note);
    json_array_foreach(json_object_get(r, "busy"), i, b)
        printf("note: %s is busy with job %d now\n", s_str(b, "node"), (int)s_num(b, "job"));
    return 0;
}

/* Plan on a described cluster, here, without a coordinator. */
static int s_plan_whatif(const s_ctl_t *c, const pl_job_spec_t *spec, const char *cluster_path)
{
    static pl_cfg_cluster_t cl;
    static pl_sched_plan_inputs_t pi;
    pl_sched_device_t *devs = NULL;
    pl_sched_link_t *links = NULL;
    pl_model_t *model = NULL;
    pl_model_bytes_t *bytes = NULL;
    pl_plan_t *plan = NULL;
    int n = 0, rc = 1;

    if (pl_cfg_cluster_load(cluster_path, &cl) || pl_sched_whatif(&cl, &devs, &n, &links)) {
        rc = s_die("%s", pl_error_msg());
        goto out;
    }
    /* the stored bytes of the model's tensors; a model described by its config.json alone
     * (planning before a download) is charged in the config's dtype */
    pl_model_config_t cfg;
    bool described = pl_model_is_described(spec->model);
    if (described ? pl_model_config_load(spec->model, &cfg) || pl_model_bytes_estimate(&cfg, &bytes)
                  : pl_model_open(spec->model, &model) || pl_model_bytes_new(model, &bytes)) {
        rc = s_die("%s", pl_error_msg());
        goto out;
    }
    if (!described)
        cfg = *pl_model_config(model);
    pl_gen_job_t g; /* the coordinator's checks: token ids in the vocabulary, positions */
    if (pl_gen_job_from_spec(spec, spec->microbatches, &cfg, &g)) {
        rc = s_die("%s", pl_error_msg());
        goto out;
    }
    pl_gen_job_clear(&g);
    if (pl_sched_plan_spec(spec, &cfg, bytes, devs, n, links, NULL, pl_gen_spec_wire_bytes(spec),
                           &pi, &plan)) {
        rc = s_die("no feasible plan: %s", pl_error_msg());
        goto out;
    }
    char note[256] = "";
    pl_sched_waves_note(plan, note, sizeof(note));
    json_t *pj = pl_plan_to_json_full(plan, &pi.in, spec->planner);
    json_t *r = pj ? json_pack("{s:o, s:s, s:[]}", "plan", pj, "note", note, "busy") : NULL;
    if (!r) {
        rc = s_die("%s", "out of memory");
        goto out;
    }
    rc = s_show_plan(c, r);
    json_decref(r);
out:
    pl_plan_destroy(&plan);
    pl_sched_plan_inputs_clear(&pi);
    pl_model_bytes_destroy(&bytes);
    pl_model_destroy(&model);
    free(devs);
    free(links);
    return rc;
}

static int s_plan(s_ctl_t *c, const char *path, int stages, const char *cluster)
{
    pl_msg_t *m = malloc(sizeof(*m));
    json_t *r;
    int rc;
    if (!m)
        return s_die("%s", "out of memory");
    if (s_job_msg(path, stages, PL_MSG_PLAN, m))
        rc = 1;
    else if (cluster)
        rc = s_plan_whatif(c, &m->submit, cluster);
    else if (!(rc = s_call(c, m, &r))) {
        rc = s_show_plan(c, r);
        json_decref(r);
    }
    pl_msg_clear(m);
    free(m);
    return rc;
}

static int s_catalog(const s_ctl_t *c)
{
    json_t *arr = json_array();
    for (int i = 0; i < pl_sched_catalog_count(); i++) {
        const pl_sched_catalog_entry_t *e = pl_sched_catalog_get(i);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:I}", "name",
                                             e->name, "aliases", e->aliases, "vendor", e->vendor,
                                             "backend", e->backend, "tflops", e->tflops,
                                             "mem_gbps", e->mem_gbps, "mem_bytes",
                                             (json_int_t)e->mem_bytes));
    }
    if (c->json) {
        s_print_json(arr);
    } else {
        size_t i;
        json_t *e;
        printf("%-22s %-8s %-7s %10s %10s %9s\n", "KIND", "VENDOR", "BACKEND", "TFLOP/S",
               "GB/S", "MEM(GiB)");
        json_array_foreach(arr, i, e)
            printf("%-22s %-8s %-7s %10.1f %10.1f %9.0f\n", s_str(e, "name"), s_str(e, "vendor"),
                   s_str(e, "backend"), s_num(e, "tflops"), s_num(e, "mem_gbps"),
                   s_num(e, "mem_bytes") / 1073741824.0);
    }
    json_decref(arr);
    return 0;
}

static int s_nodes(s_ctl_t *c)
{
    json_t *r, *n;
    size_t i;
    pl_msg_t q;
    pl_msg_init(&q, PL_MSG_NODES);
    if (s_call(c, &q, &r))
        return 1;
    json_t *sec = json_object_get(r, "security");
    if (json_is_true(json_object_get(sec, "insecure")))
        fprintf(stderr, "pipectl: WARNING: this cluster runs with security.insecure: anyone who "
                        "reaches %s may submit, read every result and shut it down\n",
                c->endpoint);
    if (c->json) {
        s_print_json(r);
        json_decref(r);
        return 0;
    }
    printf("%-12s %-16s %-8s %-5s %-8s %6s %10s %10s %10s\n", "NODE", "HOST", "STATE", "JOB",
           "DEVICE", "CORES", "GFLOP/S", "GB/S", "MEM(GiB)");
    json_array_foreach(json_object_get(r, "nodes"), i, n)
    {
        json_t *d = json_array_get(json_object_get(n, "devices"), 0);
        printf("%-12s %-16s %-8s %-5d %-8s %6d %10.1f %10.1f %10.2f\n", s_str(n, "name"),
               s_str(n, "host"), s_str(n, "state"), (int)s_num(n, "job"),
               d ? s_str(d, "id") : "-", d ? (int)s_num(d, "cores") : 0,
               d ? s_num(d, "gflops") : 0, d ? s_num(d, "mem_gbps") : 0,
               d ? s_num(d, "mem_bytes") / 1073741824.0 : 0);
    }
    json_decref(r);
    return 0;
}

static int s_health(s_ctl_t *c, const char *node)
{
    json_t *r, *d;
    size_t i;
    pl_msg_t q;
    pl_msg_init(&q, PL_MSG_HEALTH);
    if (strlen(node) > PL_CFG_NAME_MAX)
        return s_die("no node '%s'", node);
    snprintf(q.health.node, sizeof(q.health.node), "%s", node);
    if (s_call(c, &q, &r))
        return 1;
    if (c->json) {
        s_print_json(r);
        json_decref(r);
        return 0;
    }
    json_t *hb = json_object_get(r, "heartbeat");
    printf("node:       %s (%s)\n", s_str(r, "name"), s_str(r, "host"));
    printf("state:      %s, last heartbeat %.2f s ago, up %.0f s\n", s_str(r, "state"),
           s_num(r, "last_seen_s"), s_num(r, "uptime_s"));
    printf("load:       %.2f   rss: %.1f MiB   stages: %zu\n", s_num(hb, "load1"),
           s_num(hb, "rss_kb") / 1024.0, json_array_size(json_object_get(hb, "stages")));
    json_array_foreach(json_object_get(r, "devices"), i, d)
    {
        const json_t *l = json_object_get(d, "learned");
        printf("device:     %s  %s, %d cores, %.2f GiB, %.1f GFLOP/s, %.1f GB/s\n",
               s_str(d, "id"), s_str(d, "name"), (int)s_num(d, "cores"),
               s_num(d, "mem_bytes") / 1073741824.0, s_num(d, "gflops"), s_num(d, "mem_gbps"));
        if (json_is_object(l))
            printf("            planned with %.1f GFLOP/s, %.1f GB/s (learned from %d job%s)\n",
                   s_num(l, "gflops"), s_num(l, "mem_gbps"), (int)s_num(l, "jobs"),
                   s_num(l, "jobs") == 1 ? "" : "s");
    }
    json_array_foreach(json_object_get(r, "unavailable"), i, d)
        printf("no %-8s %s\n", s_str(d, "backend"), s_str(d, "why"));
    json_decref(r);
    return 0;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: pipectl [-c ENDPOINT] [-o table|json] [--timeout S] COMMAND ...\n"
               "  submit JOB.yaml [--wait] [--stages N]   queue a job (--wait: follow it, print results)\n"
               "  plan JOB.yaml [--stages N] [--cluster WHATIF.yaml]\n"
               "                                         the plan the job would get on the live\n"
               "                                         cluster, or on a described one (no\n"
               "                                         coordinator needed)\n"
               "  catalog                                device kinds a described cluster can use\n"
               "  status JOB                             state, plan and throughput of a job\n"
               "  results JOB                            the job's output in prompt order: the text of a\n"
               "                                         text job, else JSONL of token ids\n"
               "  generate MODEL PROMPT [--max-tokens N] [--temperature T] [--chat] [--stop S]...\n"
               "                                         run one prompt (text; --chat: a user\n"
               "                                         message in the model's chat template)\n"
               "                                         and print its text as it is generated\n"
               "  cancel JOB                             stop a job\n"
               "  nodes                                  the cluster's nodes and devices\n"
               "  health NODE                            one node's devices and heartbeat\n"
               "  trace JOB [-o FILE.json] [--svg FILE.svg]\n"
               "                                         the job's stage timelines: Chrome Trace\n"
               "                                         JSON (Perfetto) and/or an SVG picture\n"
               "  shutdown                               stop the coordinator and its daemons\n"
               "  keygen BASE                            write a CURVE key pair: BASE.key (the\n"
               "                                         secret, 0600) and BASE.pub\n"
               "The endpoint defaults to $PIPELD_COORDINATOR, else tcp://127.0.0.1:5555. A\n"
               "coordinator with keys in its cluster file needs -k PUBLIC_KEY (or\n"
               "$PIPELD_COORDINATOR_KEY) and --key FILE (or $PIPELD_KEY_FILE), a secret key on its\n"
               "allow-list; without them pipectl uses the local cluster's keys (the state\n"
               "directory's keys/: $PIPELD_STATE_DIR, else $XDG_STATE_HOME/pipeld, else\n"
               "~/.local/state/pipeld).\n"
               "Example: pipectl generate models/llama3 \"Why is the sky blue?\" --chat "
               "--max-tokens 200\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"coordinator", required_argument, NULL, 'c'},
                                         {"coordinator-key", required_argument, NULL, 'k'},
                                         {"key", required_argument, NULL, 'K'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"timeout", required_argument, NULL, 'T'},
                                         {"wait", no_argument, NULL, 'w'},
                                         {"stages", required_argument, NULL, 's'},
                                         {"cluster", required_argument, NULL, 'C'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"max-tokens", required_argument, NULL,
                                          PL_PIPECTL_GEN_MAX_TOKENS},
                                         {"temperature", required_argument, NULL,
                                          PL_PIPECTL_GEN_TEMPERATURE},
                                         {"chat", no_argument, NULL, PL_PIPECTL_GEN_CHAT},
                                         {"stop", required_argument, NULL, PL_PIPECTL_GEN_STOP},
                                         {"svg", required_argument, NULL, 'S'},
                                         {NULL, 0, NULL, 0}};
    s_ctl_t c = {.endpoint = getenv("PIPELD_COORDINATOR"), .timeout_s = 10};
    const char *key = getenv("PIPELD_COORDINATOR_KEY"); /* CURVE: the coordinator's public key */
    const char *key_file = getenv("PIPELD_KEY_FILE");   /* CURVE: this client's secret key */
    bool wait = false;
    const char *cluster = NULL, *out_arg = NULL, *svg = NULL;
    pl_pipectl_gen_opts_t gen = {0};
    int stages = -1, o, rc;

    if (!c.endpoint || !*c.endpoint)
        c.endpoint = "tcp://127.0.0.1:5555";
    /* GNU getopt moves the command words after the options, wherever the user put them */
    while ((o = getopt_long(argc, argv, "c:k:K:o:T:ws:C:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': c.endpoint = optarg; break;
        case 'k': key = optarg; break;
        case 'K': key_file = optarg; break;
        case 'o': out_arg = optarg; break; /* a format, or trace's output file */
        case 'S': svg = optarg; break;
        case 'T': c.timeout_s = atof(optarg) > 0 ? atof(optarg) : 10; break;
        case 'w': wait = true; break;
        case 's': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 64)
                return s_die("--stages: '%s' is not a count in [0, 64]", optarg);
            stages = (int)v;
            break;
        }
        case 'C': cluster = optarg; break;
        case 'h': s_usage(stdout); return 0;
        case PL_PIPECTL_GEN_MAX_TOKENS:
        case PL_PIPECTL_GEN_TEMPERATURE:
        case PL_PIPECTL_GEN_CHAT:
        case PL_PIPECTL_GEN_STOP:
            if (pl_pipectl_gen_opt(&gen, o, optarg))
                return 1;
            break;
        default: s_usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        s_usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind], *arg = optind + 1 < argc ? argv[optind + 1] : NULL;
    int nargs = argc - optind - 1;
    bool trace = !strcmp(cmd, "trace");
    if (out_arg && !trace) {
        if (strcmp(out_arg, "json") && strcmp(out_arg, "table"))
            return s_die("-o takes table or json, not '%s'", out_arg);
        c.json = !strcmp(out_arg, "json");
    }
    if (svg && !trace)
        return s_die("--svg is trace's option, not %s's", cmd);
    if (!strcmp(cmd, "keygen") && nargs == 1) {
        pl_tx_keypair_t pair;
        if (pl_tx_key_generate(arg, &pair))
            return s_die("%s", pl_error_msg());
        printf("%s\n", pair.public_key); /* for the cluster file's security.clients */
        return 0;
    }
    if (pl_tx_ctx_new(&c.ctx) || pl_tx_sock_new(c.ctx, PL_TX_DEALER, &c.sock)) {
        rc = s_die("%s", pl_error_msg());
    } else if (pl_tx_key_client_setup(c.sock, key, key_file, "admin", NULL)) {
        rc = s_die("%s", pl_error_msg());
    } else if (pl_tx_sock_connect(c.sock, c.endpoint)) {
        rc = s_die("bad coordinator endpoint '%s'", c.endpoint);
    } else if (gen.any && strcmp(cmd, "generate")) {
        rc = s_die("--max-tokens, --temperature, --chat and --stop are generate's options, not "
                   "%s's", cmd);
    } else if (!strcmp(cmd, "generate") && nargs == 2) {
        rc = pl_pipectl_generate(&c, arg, argv[optind + 2], stages, &gen);
    } else if (!strcmp(cmd, "submit") && nargs == 1) {
        rc = s_submit(&c, arg, wait, stages);
    } else if ((!strcmp(cmd, "status") || !strcmp(cmd, "results") || !strcmp(cmd, "cancel")) &&
               nargs == 1) {
        int64_t id = s_job_id(arg);
        if (id < 0)
            rc = s_die("'%s' is not a job id", arg);
        else if (!strcmp(cmd, "status"))
            rc = s_status(&c, id);
        else if (!strcmp(cmd, "results"))
            rc = s_results(&c, id);
        else {
            json_t *r;
            pl_msg_job_state_t js;
            rc = s_call_job(&c, PL_MSG_KILL, id, &r);
            if (!rc) {
                if (pl_msg_job_state_decode(r, &js))
                    rc = s_die("bad answer to KILL: %s", pl_error_msg());
                else
                    printf("job %u %s\n", js.job, js.state);
                json_decref(r);
            }
        }
    } else if (!strcmp(cmd, "plan") && nargs == 1) {
        rc = s_plan(&c, arg, stages, cluster);
    } else if (!strcmp(cmd, "catalog") && nargs == 0) {
        rc = s_catalog(&c);
    } else if (!strcmp(cmd, "nodes") && nargs == 0) {
        rc = s_nodes(&c);
    } else if (!strcmp(cmd, "health") && nargs == 1) {
        rc = s_health(&c, arg);
    } else if (trace && nargs == 1) {
        rc = pl_pipectl_trace(&c, arg, out_arg, svg);
    } else if (!strcmp(cmd, "shutdown") && nargs == 0) {
        json_t *r;
        pl_msg_t q;
        pl_msg_init(&q, PL_MSG_SHUTDOWN);
        rc = s_call(&c, &q, &r);
        if (!rc)
            json_decref(r);
    } else {
        fprintf(stderr, "pipectl: unknown command or wrong arguments: %s\n", cmd);
        s_usage(stderr);
        rc = 2;
    }
    pl_tx_sock_destroy(&c.sock);
    pl_tx_ctx_destroy(&c.ctx);
    return rc;
}
