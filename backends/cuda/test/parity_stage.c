/* Stage parity: the GPU backend and the CPU backend run the same script of microbatches (prefill,
 * decode, mixed batches, a freed and reused slot, changing batch sizes) on one model, and a greedy
 * generation; outputs are compared with a tolerance set by the model's dtype. */
#include "backends/cuda/test/parity.h"

#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_SEQS 4
#define S_MAX_CTX 256
#define S_MAX_TOKENS 64
#define S_MAX_STEPS 16

typedef struct {
    int n_seq, n_tokens;
    int slot[S_MAX_SEQS], pos0[S_MAX_SEQS], n_tok[S_MAX_SEQS];
    int free_slot; /* freed before the step, or -1 */
    int32_t ids[S_MAX_TOKENS];
    float *hidden; /* [n_tokens][hidden] for stages without the embedding */
} s_step_t;

typedef struct {
    const pl_be_ops_t *ops;
    void *dev, *stage;
} s_side_t;

static int s_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Logit of the best token minus the runner-up's: how close a greedy step was to flipping. */
static float s_margin(const float *x, int n)
{
    int best = s_argmax(x, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != best && x[i] > second)
            second = x[i];
    return x[best] - second;
}

static size_t s_out_floats(const pl_model_config_t *c, const pl_be_stage_params_t *p,
                           const s_step_t *s)
{
    return p->has_head ? (size_t)s->n_seq * c->vocab : (size_t)s->n_tokens * c->hidden;
}

static pl_status_t s_step(s_side_t *side, const pl_be_stage_params_t *p, const s_step_t *s,
                          float *out)
{
    pl_be_batch_t b = {.n_seq = s->n_seq,
                       .n_tokens = s->n_tokens,
                       .slot = s->slot,
                       .pos0 = s->pos0,
                       .n_tok = s->n_tok};
    if (s->free_slot >= 0 && side->ops->stage_free_seq)
        side->ops->stage_free_seq(side->stage, s->free_slot);
    return side->ops->stage_forward(
        side->stage, &b, p->has_embed ? (const void *)s->ids : (const void *)s->hidden, out);
}

/* Build the script, running it on the CPU as it goes: decode tokens are the CPU's argmax. The
 * CPU outputs are kept in ref[step]. Returns the number of steps, 0 on failure. */
static int s_script(pt_ctx_t *t, s_side_t *cpu, const pl_model_config_t *c,
                    const pl_be_stage_params_t *p, s_step_t *steps, float **ref)
{
    int len[S_MAX_SEQS] = {0}, last_tok[S_MAX_SEQS] = {0}, n = 0;
    uint64_t key = pl_rand_key(t->seed, 77, 0);
    uint64_t ctr = 0;
    /* (slots, n_tok) per step; n_tok 1 continues a sequence, more starts or extends one */
    static const struct {
        int n_seq, slot[S_MAX_SEQS], n_tok[S_MAX_SEQS], free_slot, restart;
    } plan[] = {
        {3, {0, 2, 1}, {7, 1, 20}, -1, 0},
        {3, {0, 2, 1}, {1, 1, 1}, -1, 0},
        {3, {0, 2, 1}, {1, 1, 1}, -1, 0},
        {3, {0, 2, 1}, {1, 1, 1}, -1, 0},
        {3, {0, 2, 1}, {1, 1, 1}, -1, 0},
        {2, {0, 3}, {1, 5}, -1, 0}, /* mixed: decode + a new prefill */
        {1, {2}, {4}, 2, 1},        /* slot 2 freed and reused from position 0 */
        {4, {0, 1, 2, 3}, {1, 1, 1, 1}, -1, 0},
        {4, {0, 1, 2, 3}, {1, 1, 1, 1}, -1, 0},
        {4, {0, 1, 2, 3}, {1, 1, 1, 1}, -1, 0},
        {2, {3, 1}, {1, 1}, -1, 0},
        {2, {3, 1}, {1, 1}, -1, 0},
        {2, {3, 1}, {1, 1}, -1, 0},
        {3, {1, 0, 3}, {3, 1, 2}, -1, 0}, /* chunked prefill continuing sequences */
    };
    for (size_t k = 0; k < sizeof(plan) / sizeof(plan[0]) && n < S_MAX_STEPS; k++, n++) {
        s_step_t *s = &steps[n];
        memset(s, 0, sizeof(*s));
        s->n_seq = plan[k].n_seq;
        s->free_slot = plan[k].free_slot;
        if (plan[k].restart)
            len[plan[k].slot[0]] = 0;
        for (int i = 0; i < s->n_seq; i++) {
            int sl = plan[k].slot[i], nt = plan[k].n_tok[i];
            s->slot[i] = sl;
            s->pos0[i] = len[sl];
            s->n_tok[i] = nt;
            for (int j = 0; j < nt; j++) {
                bool follow = nt == 1 && len[sl] > 0 && p->has_head;
                s->ids[s->n_tokens + j] =
                    follow ? last_tok[sl] : (int32_t)(pl_rand_u64(key, ctr++) % (uint64_t)c->vocab);
            }
            s->n_tokens += nt;
            len[sl] += nt;
        }
        if (!p->has_embed) {
            s->hidden = malloc((size_t)s->n_tokens * c->hidden * sizeof(float));
            pt_fill(s->hidden, (size_t)s->n_tokens * c->hidden, t->seed, 100 + k, -1.0f, 1.0f);
        }
        ref[n] = malloc(s_out_floats(c, p, s) * sizeof(float));
        if (!ref[n] || s_step(cpu, p, s, ref[n]) != PL_OK) {
            pt_check(t, false, "cpu stage step %d: %s", n, pl_error_msg());
            return 0;
        }
        if (p->has_head)
            for (int i = 0; i < s->n_seq; i++)
                last_tok[s->slot[i]] = s_argmax(ref[n] + (size_t)i * c->vocab, c->vocab);
    }
    return n;
}

/* Run the script on the GPU stage; compare each step with the CPU's output, and with `other`
 * (a previous GPU run) when given. Outputs go to mine[step]. */
static void s_replay(pt_ctx_t *t, s_side_t *gpu, const pl_model_config_t *c,
                     const pl_be_stage_params_t *p, const s_step_t *steps, int n, float **ref,
                     float **mine, float **other, const char *label, double tol)
{
    int agree = 0, total = 0;
    double worst = 0.0;
    for (int k = 0; k < n; k++) {
        size_t cnt = s_out_floats(c, p, &steps[k]);
        mine[k] = malloc(cnt * sizeof(float));
        pl_status_t st = s_step(gpu, p, &steps[k], mine[k]);
        if (!pt_check(t, st == PL_OK, "%s step %d forward (%d seqs, %d tokens)%s%s", label, k,
                      steps[k].n_seq, steps[k].n_tokens, st ? ": " : "",
                      st ? pt_gpu_error_msg() : ""))
            return;
        char what[160];
        snprintf(what, sizeof(what), "%s step %d (%d seqs, %d tok) vs cpu", label, k,
                 steps[k].n_seq, steps[k].n_tokens);
        pt_compare(t, what, mine[k], ref[k], cnt, tol);
        if (p->has_head)
            for (int i = 0; i < steps[k].n_seq; i++, total++)
                agree += s_argmax(mine[k] + (size_t)i * c->vocab, c->vocab) ==
                         s_argmax(ref[k] + (size_t)i * c->vocab, c->vocab);
        if (other && other[k])
            for (size_t i = 0; i < cnt; i++)
                worst = fmax(worst, fabs((double)mine[k][i] - other[k][i]));
    }
    if (p->has_head)
        fprintf(t->log, "INFO %s: argmax agrees with cpu on %d of %d rows\n", label, agree, total);
    if (other)
        pt_check(t, worst <= 1e-5, "%s equals the previous gpu run (max diff %.3g)", label, worst);
}

static pl_status_t s_load(s_side_t *side, pl_model_t *model, const pl_be_stage_params_t *p)
{
    side->stage = NULL;
    return side->ops->stage_load(side->dev, model, p, &side->stage);
}

static void s_unload(s_side_t *side)
{
    if (side->stage)
        side->ops->stage_unload(side->stage);
    side->stage = NULL;
}

static void s_free_outs(float **o, int n)
{
    for (int i = 0; i < n; i++) {
        free(o[i]);
        o[i] = NULL;
    }
}

/* The script on one stage shape, under several GPU settings. */
static void s_stage_shape(pt_ctx_t *t, s_side_t *cpu, s_side_t *gpu, pl_model_t *model,
                          const pl_be_stage_params_t *p, const char *shape, double tol)
{
    const pl_model_config_t *c = pl_model_config(model);
    s_step_t steps[S_MAX_STEPS];
    float *ref[S_MAX_STEPS] = {0}, *a[S_MAX_STEPS] = {0}, *b[S_MAX_STEPS] = {0};
    char label[96];
    int n;

    if (s_load(cpu, model, p) != PL_OK) {
        pt_check(t, false, "%s: cpu stage load: %s", shape, pl_error_msg());
        return;
    }
    n = s_script(t, cpu, c, p, steps, ref);
    s_unload(cpu);

    static const struct {
        const char *graphs, *gemm, *kv, *name;
    } modes[] = {
        {"1", "vendor", "0", "graphs"},
        {"0", "vendor", "0", "eager"},
        {"1", "builtin", "0", "builtin-gemm"},
        {"1", "vendor", "1", "kv-f32"},
    };
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]) && n > 0; m++) {
        setenv("PL_GPU_GRAPHS", modes[m].graphs, 1);
        setenv("PL_GPU_GEMM", modes[m].gemm, 1);
        setenv("PL_GPU_KV_F32", modes[m].kv, 1);
        snprintf(label, sizeof(label), "%s %s", shape, modes[m].name);
        pl_status_t st = s_load(gpu, model, p);
        if (pt_check(t, st == PL_OK, "%s: gpu stage load%s%s", label, st ? ": " : "",
                     st ? pt_gpu_error_msg() : "")) {
            /* eager must equal graphs exactly: same kernels in the same order */
            s_replay(t, gpu, c, p, steps, n, ref, m == 0 ? a : b, m == 1 ? a : NULL, label, tol);
            s_unload(gpu);
        }
        if (m != 0)
            s_free_outs(b, n);
    }
    unsetenv("PL_GPU_GRAPHS");
    unsetenv("PL_GPU_GEMM");
    unsetenv("PL_GPU_KV_F32");
    s_free_outs(a, n);
    s_free_outs(b, n);
    s_free_outs(ref, n);
    for (int k = 0; k < n; k++)
        free(steps[k].hidden);
}

/* Bad input must fail with the right status and leave the stage usable. */
static void s_errors(pt_ctx_t *t, s_side_t *gpu, pl_model_t *model, const pl_be_stage_params_t *p)
{
    const pl_model_config_t *c = pl_model_config(model);
    float *out = malloc((size_t)S_MAX_SEQS * c->vocab * sizeof(float));
    int32_t ids[S_MAX_TOKENS + 1] = {0};
    int slot[1] = {0}, pos0[1] = {0}, n_tok[1] = {2};
    pl_be_batch_t b = {.n_seq = 1, .n_tokens = 2, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    if (s_load(gpu, model, p) != PL_OK) {
        pt_check(t, false, "error checks: gpu stage load: %s", pt_gpu_error_msg());
        free(out);
        return;
    }
    ids[1] = c->vocab;
    pl_status_t st = gpu->ops->stage_forward(gpu->stage, &b, ids, out);
    pt_check(t, st == PL_ERR_RANGE, "token id = vocab rejected (%s)", pt_gpu_error_msg());
    ids[1] = 1;
    slot[0] = S_MAX_SEQS;
    st = gpu->ops->stage_forward(gpu->stage, &b, ids, out);
    pt_check(t, st == PL_ERR_RANGE, "slot = max_seqs rejected (%s)", pt_gpu_error_msg());
    slot[0] = 1;
    pos0[0] = 3;
    st = gpu->ops->stage_forward(gpu->stage, &b, ids, out);
    pt_check(t, st == PL_ERR_RANGE, "position gap in a fresh slot rejected (%s)",
             pt_gpu_error_msg());
    pos0[0] = 0;
    n_tok[0] = S_MAX_TOKENS + 1;
    b.n_tokens = S_MAX_TOKENS + 1;
    st = gpu->ops->stage_forward(gpu->stage, &b, ids, out);
    pt_check(t, st == PL_ERR_RANGE, "n_tokens > max_tokens rejected (%s)", pt_gpu_error_msg());
    n_tok[0] = 2;
    b.n_tokens = 2;
    st = gpu->ops->stage_forward(gpu->stage, &b, ids, out);
    pt_check(t, st == PL_OK, "stage still works after rejected batches");
    s_unload(gpu);
    free(out);
}

/* Greedy generation of gen tokens for two prompts on each backend independently. */
static void s_generate(pt_ctx_t *t, s_side_t *cpu, s_side_t *gpu, pl_model_t *model,
                       const pl_be_stage_params_t *p, int gen, bool exact)
{
    const pl_model_config_t *c = pl_model_config(model);
    int n_prompt[2] = {t->n_prompt > 0 ? t->n_prompt : 5, 9};
    int toks[2][2][S_MAX_CTX];
    float margin[2][2][S_MAX_CTX];
    float *logits = malloc((size_t)2 * c->vocab * sizeof(float));
    s_side_t *sides[2] = {cpu, gpu};
    uint64_t key = pl_rand_key(t->seed, 88, 0);
    if (gen > S_MAX_CTX - 16)
        gen = S_MAX_CTX - 16;
    for (int sd = 0; sd < 2; sd++) {
        if (s_load(sides[sd], model, p) != PL_OK) {
            pt_check(t, false, "generation: %s stage load: %s", sd ? "gpu" : "cpu",
                     sd ? pt_gpu_error_msg() : pl_error_msg());
            free(logits);
            return;
        }
        int32_t ids[S_MAX_TOKENS];
        int slot[2] = {0, 1}, pos0[2] = {0, 0}, n_tok[2] = {n_prompt[0], n_prompt[1]}, nt = 0;
        for (int s = 0; s < 2; s++)
            for (int j = 0; j < n_prompt[s]; j++, nt++) {
                ids[nt] = (int32_t)(pl_rand_u64(key, (uint64_t)(s * 100 + j)) % c->vocab);
                if (s == 0 && t->n_prompt > 0)
                    ids[nt] = t->prompt[j] >= 0 && t->prompt[j] < c->vocab ? t->prompt[j] : 0;
            }
        for (int step = 0; step < gen; step++) {
            pl_be_batch_t b = {
                .n_seq = 2, .n_tokens = nt, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
            if (sides[sd]->ops->stage_forward(sides[sd]->stage, &b, ids, logits) != PL_OK) {
                pt_check(t, false, "generation step %d on %s: %s", step, sd ? "gpu" : "cpu",
                         sd ? pt_gpu_error_msg() : pl_error_msg());
                s_unload(sides[sd]);
                free(logits);
                return;
            }
            for (int s = 0; s < 2; s++) {
                toks[sd][s][step] = s_argmax(logits + (size_t)s * c->vocab, c->vocab);
                margin[sd][s][step] = s_margin(logits + (size_t)s * c->vocab, c->vocab);
                pos0[s] += n_tok[s];
                n_tok[s] = 1;
                ids[s] = toks[sd][s][step];
            }
            nt = 2;
        }
        s_unload(sides[sd]);
    }
    int same = 0, early = 0, need = gen < 8 ? gen : 8;
    for (int s = 0; s < 2; s++) {
        int first_diff = -1;
        for (int k = 0; k < gen && first_diff < 0; k++)
            if (toks[0][s][k] != toks[1][s][k])
                first_diff = k;
        same += first_diff < 0;
        early += first_diff >= 0 && first_diff < need;
        fprintf(t->log, "INFO greedy sequence %d: %s", s,
                first_diff < 0 ? "identical" : "differs from token ");
        if (first_diff >= 0) /* the margins say whether a rounding difference could flip it */
            fprintf(t->log, "%d (cpu %d, logit margin %.4g; gpu %d, logit margin %.4g)",
                    first_diff, toks[0][s][first_diff], margin[0][s][first_diff],
                    toks[1][s][first_diff], margin[1][s][first_diff]);
        fprintf(t->log, " (gpu:");
        for (int k = 0; k < gen && k < 12; k++)
            fprintf(t->log, " %d", toks[1][s][k]);
        fprintf(t->log, " ...)\n");
    }
    for (int sd = 0; sd < 2; sd++) {
        fprintf(t->log, "GEN %s:", sd ? "gpu" : "cpu");
        for (int k = 0; k < gen; k++)
            fprintf(t->log, " %d", toks[sd][0][k]);
        fprintf(t->log, "\n");
    }
    if (exact)
        pt_check(t, same == 2, "greedy generation of %d tokens identical to cpu (f32 model)", gen);
    else
        pt_check(t, early == 0, "greedy generation: the first %d tokens of each prompt equal "
                 "the cpu's (f16/bf16 model)", need);
    free(logits);
}

void pt_stage_run(pt_ctx_t *t, const pl_be_ops_t *gpu_ops, const char *dir, int gen, bool exact)
{
    pl_model_t *model = NULL;
    s_side_t cpu = {.ops = pl_be_cpu_ops()}, gpu = {.ops = gpu_ops};
    pl_tensor_view_t v;

    fprintf(t->log, "# stage parity on %s\n", dir);
    if (!pt_check(t, pl_model_open(dir, &model) == PL_OK, "open model %s", dir)) {
        fprintf(t->log, "  %s\n", pl_error_msg());
        return;
    }
    const pl_model_config_t *c = pl_model_config(model);
    if (pl_model_tensor(model, "model.layers.0.self_attn.q_proj.weight", &v) != PL_OK)
        v.dtype = PL_DT_F32;
    /* relative to the largest logit: f32 differs only in summation order; f16 and bf16 GEMM
     * inputs are rounded on the GPU where the CPU keeps f32 */
    double tol = v.dtype == PL_DT_F32 ? 2e-4 : v.dtype == PL_DT_F16 ? 3e-2 : 8e-2;
    fprintf(t->log,
            "INFO model: %d layers, hidden %d, heads %d/%d, head_dim %d, vocab %d, %s, "
            "tol %.0e\n",
            c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab,
            pl_dtype_name(v.dtype), tol);

    if (cpu.ops->open(0, 0, &cpu.dev) != PL_OK) {
        pt_check(t, false, "open cpu device: %s", pl_error_msg());
        goto out;
    }
    if (gpu.ops->open(0, 0, &gpu.dev) != PL_OK) {
        pt_check(t, false, "open gpu device: %s", pt_gpu_error_msg());
        goto out;
    }
    pl_be_calib_t cal;
    pl_status_t cst = gpu.ops->calibrate(gpu.dev, &cal);
    if (pt_check(t, cst == PL_OK, "gpu calibrate%s%s", cst ? ": " : "",
                 cst ? pt_gpu_error_msg() : ""))
        fprintf(t->log, "INFO gpu calibrate: %.0f GFLOP/s bf16 GEMM, %.0f GB/s read\n", cal.gflops,
                cal.mem_gbps);

    pl_be_stage_params_t full = {.first_layer = 0,
                                 .last_layer = c->n_layers - 1,
                                 .has_embed = true,
                                 .has_head = true,
                                 .max_seqs = S_MAX_SEQS,
                                 .max_ctx = S_MAX_CTX,
                                 .max_tokens = S_MAX_TOKENS};
    s_stage_shape(t, &cpu, &gpu, model, &full, "full", tol);
    pl_be_stage_params_t mid = full;
    mid.has_embed = mid.has_head = false;
    mid.first_layer = c->n_layers > 2 ? 1 : 0;
    mid.last_layer = c->n_layers > 2 ? c->n_layers - 2 : c->n_layers - 1;
    s_stage_shape(t, &cpu, &gpu, model, &mid, "middle", tol);
    pl_be_stage_params_t head = full;
    head.has_embed = false;
    head.first_layer = c->n_layers - 1;
    s_stage_shape(t, &cpu, &gpu, model, &head, "last", tol);
    s_errors(t, &gpu, model, &full);
    if (gen > 0)
        s_generate(t, &cpu, &gpu, model, &full, gen, exact);

out:
    if (gpu.dev)
        gpu.ops->close(gpu.dev);
    if (cpu.dev)
        cpu.ops->close(cpu.dev);
    pl_model_destroy(&model);
}
