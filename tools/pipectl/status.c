/* `pipectl status JOB`: a job's state, its plan, each stage's measured compute beside the
 * plan's prediction, its data plane and its throughput. */
#include "tools/pipectl/pipectl.h"

#include <stdio.h>
#include <string.h>

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

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
            printf("%-5s %-12s %-21s %-21s %-23s %s\n", "stage", "node", "prefill/call pred",
                   "decode/call pred", "stage compute pred", "link measured");
        any = true;
        char a[24], b[24], c[24], d[24], e[24], f[24], link[96] = "-";
        double np = (double)st.prefill_calls, nd = (double)st.decode_calls;
        double pp = S_NUM(p, "compute_prefill_s"), pd = S_NUM(p, "compute_decode_s");
        double mp = np > 0 ? st.prefill_compute_s / np : 0;
        double md = nd > 0 ? st.decode_compute_s / nd : 0;
        double pt = np * pp + nd * pd, mt = st.compute_s;
        if (st.has_probe)
            snprintf(link, sizeof(link), "%.2f GB/s, %.1f us (%s)", st.probe.gbps,
                     st.probe.latency_s * 1e6, st.probe.transport);
        printf("%-5zu %-12.12s %9s / %-9s %9s / %-9s %9s / %-10s %+4.0f%%  %s\n", i,
               S_STR(p, "node"), pl_pipectl_dur(pp, a, sizeof(a)), pl_pipectl_dur(mp, b, sizeof(b)),
               pl_pipectl_dur(pd, c, sizeof(c)), pl_pipectl_dur(md, d, sizeof(d)),
               pl_pipectl_dur(pt, e, sizeof(e)), pl_pipectl_dur(mt, f, sizeof(f)),
               pt > 0 ? 100.0 * (mt / pt - 1.0) : 0.0, link);
    }
    if (any)
        printf("(each pair: predicted / measured; the percentage is the stage's measured "
               "compute over the prediction)\n");
    const json_t *p = json_object_get(r, "plan"), *t = json_object_get(r, "throughput");
    if (json_is_object(p) && json_is_object(t))
        printf("predicted: prefill %.1f tok/s, decode %.1f tok/s, job %.3f s | measured: prefill "
               "%.1f tok/s, decode %.1f tok/s, job %.3f s\n",
               S_NUM(p, "prefill_tok_s"), S_NUM(p, "decode_tok_s"), S_NUM(p, "job_time_s"),
               S_NUM(t, "prefill_tok_s"), S_NUM(t, "decode_tok_s"), S_NUM(t, "wall_s"));
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
        snprintf(slots, sizeof(slots), "%d (%s)", (int)S_NUM(dp, "inbox_slots"),
                 pl_pipectl_bytes(S_NUM(dp, "inbox_bytes"), slot_b, sizeof(slot_b)));
        printf("%-5zu %-16.16s %-5s %-11s %-17s %-7d %-9d %-11s %s\n", i, S_STR(st, "link"),
               S_STR(st, "wire_dtype"),
               pl_pipectl_bytes(S_NUM(st, "bytes_sent"), sent, sizeof(sent)), slots,
               (int)S_NUM(dp, "send_credits"), (int)S_NUM(dp, "max_in_flight"),
               pl_pipectl_bytes(S_NUM(dp, "bound_bytes"), bound, sizeof(bound)),
               json_is_true(json_object_get(dp, "progress_thread")) ? "thread" : "in calls");
    }
}

int pl_pipectl_status(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    json_t *r;
    int64_t id = pl_pipectl_job_arg(args[0]);
    int rc;
    if (id < 0)
        return PL_PIPECTL_EXIT_USAGE;
    if (c->watch)
        return pl_pipectl_follow(c, id, false);
    if ((rc = pl_pipectl_call_job(c, PL_MSG_STATUS, id, &r)))
        return rc;
    if (c->json) {
        pl_pipectl_print(c, r);
    } else {
        printf("job %lld: %s  (%d sequences, %.2f s)\n", (long long)id, S_STR(r, "state"),
               (int)S_NUM(r, "sequences"), S_NUM(r, "elapsed_s"));
        printf("model: %s\n", S_STR(r, "model"));
        if (*S_STR(r, "note") && strcmp(S_STR(r, "note"), "-"))
            printf("note: %s\n", S_STR(r, "note"));
        if (json_is_object(json_object_get(r, "train"))) { /* a training job (train.c) */
            pl_pipectl_train_status(r);
        } else {
            pl_pipectl_print_plan(json_object_get(r, "plan"));
            s_print_measured(r);
            s_print_data_plane(r);
            pl_pipectl_print_throughput(stdout, json_object_get(r, "throughput"));
        }
    }
    json_decref(r);
    return 0;
}
