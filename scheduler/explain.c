/* The plan as a table people read: one row per stage, then the bottleneck, throughput, bubble
 * and speed-ups. Writes into a caller's buffer or a caller's stream. */
#include "scheduler/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_GIB (1024.0 * 1024.0 * 1024.0)

typedef struct {
    FILE *f;
    char *buf;
    size_t len, pos;
    bool truncated;
} s_out_t;

static void s_put(s_out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_put(s_out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (o->f) {
        vfprintf(o->f, fmt, ap);
    } else if (o->len > 0) {
        size_t room = o->len - o->pos;
        int n = vsnprintf(o->buf + o->pos, room, fmt, ap);
        if (n < 0 || (size_t)n >= room) {
            o->truncated = true;
            o->pos = o->len - 1;
        } else {
            o->pos += (size_t)n;
        }
    } else {
        o->truncated = true;
    }
    va_end(ap);
}

const char *pl_sched_fmt_time(double s, char *b, size_t n)
{
    if (s <= 0)
        snprintf(b, n, "0");
    else if (s < 1e-3)
        snprintf(b, n, "%.1f us", s * 1e6);
    else if (s < 1.0)
        snprintf(b, n, "%.2f ms", s * 1e3);
    else
        snprintf(b, n, "%.3f s", s);
    return b;
}

static const char *s_objective(pl_sched_objective_t o)
{
    return o == PL_SCHED_OBJ_DECODE ? "decode" : o == PL_SCHED_OBJ_PREFILL ? "prefill" : "job";
}

static void s_write(const pl_plan_t *p, s_out_t *o)
{
    char t1[32], t2[32], t3[32];
    s_put(o, "plan: %d stage%s, search %s, objective %s\n", p->n_stages,
          p->n_stages == 1 ? "" : "s", p->search ? p->search : "?", s_objective(p->objective));
    s_put(o, "%-5s %-12s %-28s %-16s %-10s %-10s %-10s %-19s %s\n", "stage", "node", "device",
          "layers", "cost", "prefill", "decode", "memory GiB", "link to next");
    for (int i = 0; i < p->n_stages; i++) {
        const pl_plan_stage_t *s = &p->stages[i];
        char dev[96], layers[40], mem[40], link[128];
        snprintf(dev, sizeof(dev), "%.48s (%s:%d)", s->device_name, s->backend, s->device_index);
        snprintf(layers, sizeof(layers), "%d-%d (%d)%s%s", s->first_layer, s->last_layer,
                 s->n_layers, s->has_embed ? " E" : "", s->has_head ? " H" : "");
        snprintf(mem, sizeof(mem), "%.2f / %.2f", s->mem_used / S_GIB, s->mem_avail / S_GIB);
        if (p->n_stages == 1)
            snprintf(link, sizeof(link), "-");
        else
            snprintf(link, sizeof(link), "%s %d: %.2f GB/s, %s, %s%s",
                     i + 1 < p->n_stages ? "stage" : "ring to stage", s->next_stage, s->link.gbps,
                     pl_sched_fmt_time(s->link.latency_s, t1, sizeof(t1)),
                     s->link_same_host ? "same host" : "cross host",
                     i + 1 < p->n_stages ? "" : " (token ids)");
        s_put(o, "%-5d %-12.12s %-28.28s %-16s %-10s %-10s %-10s %-19s %s\n", i, s->node, dev,
              layers, pl_sched_fmt_time(s->cost, t1, sizeof(t1)),
              pl_sched_fmt_time(s->t_prefill, t2, sizeof(t2)),
              pl_sched_fmt_time(s->t_decode, t3, sizeof(t3)), mem, link);
    }
    int n_chosen = 0; /* left out by the search; the others were no candidates (why given) */
    for (int i = 0; i < p->n_left_out; i++)
        n_chosen += !p->left_out[i].why[0];
    if (n_chosen > 0) {
        s_put(o, "left out (they would not lower the bottleneck, or do not fit):");
        for (int i = 0, k = 0; i < p->n_left_out; i++)
            if (!p->left_out[i].why[0])
                s_put(o, "%s %s on %s", k++ ? "," : "", p->left_out[i].device_name,
                      p->left_out[i].node);
        s_put(o, "\n");
    }
    for (int i = 0; i < p->n_left_out; i++)
        if (p->left_out[i].why[0])
            s_put(o, "left out: %s on %s: %s\n", p->left_out[i].device_name, p->left_out[i].node,
                  p->left_out[i].why);
    if (p->n_stages > 0) {
        const pl_plan_stage_t *b = &p->stages[p->bottleneck_stage];
        s_put(o, "bottleneck: stage %d (%s on %s), cost %s per microbatch\n", p->bottleneck_stage,
              b->device_name, b->node, pl_sched_fmt_time(p->bottleneck, t1, sizeof(t1)));
    }
    s_put(o,
          "microbatches: %d x %d sequences; %d of %d sequences resident (%d wave%s); ctx %d; "
          "max tokens per call %d\n",
          p->microbatches, p->microbatch_size, p->resident_seqs, p->n_seqs, p->waves,
          p->waves == 1 ? "" : "s", p->ctx, p->max_tokens);
    if (p->prefill_chunk > 0)
        s_put(o, "prefill chunk: %d tokens per sequence and message\n", p->prefill_chunk);
    else
        s_put(o, "prefill chunk: whole prompts\n");
    if (p->prefill_sched.n > 0) { /* what runs instead of the equal chunks */
        s_put(o, "prefill schedule:");
        for (int i = 0; i < p->prefill_sched.n; i++)
            s_put(o, "%s%d", i ? ", " : " ", p->prefill_sched.len[i]);
        s_put(o, " tokens, %s (equal chunks %s)\n",
              pl_sched_fmt_time(p->prefill_time, t1, sizeof(t1)),
              pl_sched_fmt_time(p->prefill_time_even, t2, sizeof(t2)));
    }
    s_put(o, "prefill: %.1f tokens/s, %s per wave, bubble %.1f%%\n", p->prefill_tok_s,
          pl_sched_fmt_time(p->prefill_time, t1, sizeof(t1)), 100.0 * p->bubble_prefill);
    s_put(o, "decode: %.1f tokens/s, %s per step, bubble %.1f%% (ring %s)\n", p->decode_tok_s,
          pl_sched_fmt_time(p->decode_period, t1, sizeof(t1)), 100.0 * p->bubble_decode,
          pl_sched_fmt_time(p->ring_s, t2, sizeof(t2)));
    s_put(o, "job: %s predicted", pl_sched_fmt_time(p->job_time, t1, sizeof(t1)));
    if (p->speedup_even > 0)
        s_put(o, "; %.2fx over an even split (%s)", p->speedup_even,
              pl_sched_fmt_time(p->even_job_time, t2, sizeof(t2)));
    else
        s_put(o, "; an even split does not fit");
    if (p->speedup_single > 0)
        s_put(o, "; %.2fx over the fastest single device that fits (%s on %s, %s)",
              p->speedup_single, p->single.device_name, p->single.node,
              pl_sched_fmt_time(p->single_job_time, t3, sizeof(t3)));
    else
        s_put(o, "; no single device fits");
    s_put(o, "\n");
}

pl_status_t pl_plan_explain(const pl_plan_t *plan, char *buf, size_t len)
{
    if (!plan || !buf || len == 0)
        return pl_error(PL_ERR_INVALID, "explain: missing plan or buffer");
    buf[0] = '\0';
    s_out_t o = {.buf = buf, .len = len};
    s_write(plan, &o);
    if (o.truncated)
        return pl_error(PL_ERR_RANGE, "explain: the table needs more than %zu bytes", len);
    return PL_OK;
}

void pl_plan_print(const pl_plan_t *plan, FILE *stream)
{
    if (!plan || !stream)
        return;
    s_out_t o = {.f = stream};
    s_write(plan, &o);
}

char *pl_plan_explain_new(const pl_plan_t *plan)
{
    for (size_t len = 16384; len <= (1u << 22); len *= 8) {
        char *buf = malloc(len);
        if (!buf)
            return NULL;
        if (pl_plan_explain(plan, buf, len) == PL_OK)
            return buf;
        free(buf);
    }
    return NULL;
}
