/* A training stage's master weights (train_weights.h): buffers per tensor of the stage, filled
 * from the model through the checkpoint's own name table, or from per-tensor random streams. */
#include "pipeline/train_weights.h"

#include "pipeline/train_ckpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pl_train_master {
    pl_train_weights_t w;
    pl_cpu_tlayer_t *layers; /* [n_layers] */
    int n_layers;
};

pl_status_t pl_train_cfg_from_model(const pl_model_config_t *mc, int seq_len, int n_mb,
                                    double *inv_freq, pl_train_local_cfg_t *cfg)
{
    if (mc->qkv_bias || mc->qk_norm)
        return pl_error(PL_ERR_UNSUPPORTED, "training a %s model: the trainer has no %s",
                        pl_model_family_name(mc->family),
                        mc->qkv_bias ? "q/k/v projection biases" : "per-head q/k norms");
    if (mc->sliding_window > 0 && mc->sliding_window < seq_len)
        return pl_error(PL_ERR_UNSUPPORTED, "training: the model's sliding window %d is shorter "
                                            "than seq_len %d (the trainer attends to every "
                                            "earlier position)",
                        mc->sliding_window, seq_len);
    if (seq_len < 1 || seq_len > mc->max_pos)
        return pl_error(PL_ERR_RANGE, "training: seq_len %d outside 1..%d "
                                      "(max_position_embeddings)",
                        seq_len, mc->max_pos);
    pl_model_rope_inv_freq(mc, inv_freq);
    pl_train_local_cfg_t c = *cfg;
    c.dims = (pl_cpu_tdims_t){.hidden = mc->hidden, .inter = mc->intermediate,
                              .n_heads = mc->n_heads, .n_kv = mc->n_kv_heads,
                              .head_dim = mc->head_dim, .eps = mc->rms_eps};
    c.n_layers = mc->n_layers, c.vocab = mc->vocab, c.seq_len = seq_len, c.n_mb = n_mb;
    c.inv_freq = inv_freq, c.recompute = false;
    *cfg = c;
    return PL_OK;
}

pl_status_t pl_train_cfg_from_job(const pl_cfg_train_t *job, const pl_model_config_t *mc,
                                  double *inv_freq, pl_train_local_cfg_t *cfg)
{
    if (job->micro_batch < 1 || job->global_batch % job->micro_batch)
        return pl_error(PL_ERR_INVALID, "training: global_batch %d is not a multiple of "
                                        "micro_batch %d",
                        job->global_batch, job->micro_batch);
    pl_train_local_cfg_t c = {0};
    pl_status_t rc = pl_train_cfg_from_model(mc, job->seq_len,
                                             job->global_batch / job->micro_batch, inv_freq, &c);
    if (rc != PL_OK)
        return rc;
    const pl_cfg_train_opt_t *o = &job->opt;
    bool constant = !strcmp(o->lr_schedule, "constant");
    c.recompute = job->recompute;
    c.opt = (pl_adamw_cfg_t){.lr = o->lr,
                             .min_lr = constant ? o->lr : o->min_lr,
                             .warmup_steps = o->warmup_steps,
                             .total_steps = job->steps,
                             .beta1 = o->beta1,
                             .beta2 = o->beta2,
                             .eps = o->eps,
                             .weight_decay = o->weight_decay,
                             .clip_norm = o->clip_norm};
    if ((rc = pl_adamw_cfg_check(&c.opt)) != PL_OK)
        return rc;
    *cfg = c;
    return PL_OK;
}

void pl_train_master_destroy(pl_train_master_t **tm_p)
{
    if (!tm_p || !*tm_p)
        return;
    pl_train_master_t *t = *tm_p;
    free(t->w.embed);
    free(t->w.final_norm);
    free(t->w.head);
    for (int l = 0; l < t->n_layers; l++)
        for (int i = 0; i < 9; i++)
            free(*pl_cpu_tlayer_field(&t->layers[l], i));
    free(t->layers);
    free(t);
    *tm_p = NULL;
}

pl_train_weights_t *pl_train_master_weights(pl_train_master_t *tm)
{
    return &tm->w;
}

static size_t s_numel(const pl_st_out_t *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* Buffers for every tensor of the stage; *list_p / *names_p the stage's table (caller frees). */
static pl_status_t s_alloc(const pl_train_local_cfg_t *cfg, int l0, int l1, bool first,
                           bool last, pl_train_master_t **tm_p, pl_st_out_t **list_p,
                           char (**names_p)[PL_TRAIN_CKPT_NAME], size_t *n_p)
{
    if (l0 < 0 || l1 < l0 || l1 > cfg->n_layers || cfg->n_layers < 1 || cfg->vocab < 1)
        return pl_error(PL_ERR_INVALID, "training weights: layers %d..%d of %d", l0, l1,
                        cfg->n_layers);
    pl_train_master_t *t = calloc(1, sizeof(*t));
    size_t cap = (size_t)(l1 - l0) * 9 + 3;
    pl_st_out_t *list = calloc(cap, sizeof(*list));
    char(*names)[PL_TRAIN_CKPT_NAME] = calloc(cap, PL_TRAIN_CKPT_NAME);
    pl_status_t rc = PL_OK;
    if (!t || !list || !names || !(t->layers = calloc((size_t)cfg->n_layers, sizeof(*t->layers)))) {
        rc = pl_error(PL_ERR_NOMEM, "training weights");
        goto err;
    }
    t->n_layers = cfg->n_layers;
    t->w.layers = t->layers;
    /* the table with NULL data gives shapes; allocate each, then take the table again with
     * the pointers */
    size_t n = pl_train_ckpt_stage_tensors(cfg, NULL, first, last, l0, l1, list, names);
    size_t k = 0;
    if (first && !(t->w.embed = malloc(sizeof(float) * s_numel(&list[k++]))))
        rc = PL_ERR_NOMEM;
    for (int l = l0; l < l1 && rc == PL_OK; l++)
        for (int i = 0; i < 9 && rc == PL_OK; i++, k++)
            if (!(*pl_cpu_tlayer_field(&t->layers[l], i) =
                      malloc(sizeof(float) * s_numel(&list[k]))))
                rc = PL_ERR_NOMEM;
    if (last && rc == PL_OK &&
        (!(t->w.final_norm = malloc(sizeof(float) * s_numel(&list[k]))) ||
         !(t->w.head = malloc(sizeof(float) * s_numel(&list[k + 1])))))
        rc = PL_ERR_NOMEM;
    if (rc != PL_OK) {
        rc = pl_error(PL_ERR_NOMEM, "training weights: layers %d..%d", l0, l1);
        goto err;
    }
    pl_train_ckpt_stage_tensors(cfg, &t->w, first, last, l0, l1, list, names);
    *tm_p = t, *list_p = list, *names_p = names, *n_p = n;
    return PL_OK;
err:
    pl_train_master_destroy(&t);
    free(list);
    free(names);
    return rc;
}

pl_status_t pl_train_master_load(pl_model_t *m, const pl_train_local_cfg_t *cfg, int l0, int l1,
                                 bool first, bool last, pl_train_master_t **tm_p)
{
    pl_train_master_t *t = NULL;
    pl_st_out_t *list = NULL;
    char(*names)[PL_TRAIN_CKPT_NAME] = NULL;
    size_t n = 0;
    pl_status_t rc = s_alloc(cfg, l0, l1, first, last, &t, &list, &names, &n);
    if (rc != PL_OK)
        return rc;
    bool tied = pl_model_config(m)->tie_embeddings;
    for (size_t k = 0; k < n; k++) {
        /* a tied model has no lm_head: its head is the embedding table */
        const char *name = tied && last && k == n - 1 ? "model.embed_tokens.weight" : list[k].name;
        float *src;
        bool owned;
        if ((rc = pl_model_tensor_f32(m, name, list[k].ndim, list[k].shape, &src, &owned)) !=
            PL_OK) {
            rc = pl_error_prefix(rc, "training weights from %s: ", pl_model_dir(m));
            goto err;
        }
        memcpy((float *)list[k].data, src, sizeof(float) * s_numel(&list[k]));
        if (owned)
            free(src);
    }
    free(list);
    free(names);
    *tm_p = t;
    return PL_OK;
err:
    pl_train_master_destroy(&t);
    free(list);
    free(names);
    return rc;
}

static uint64_t s_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Tensor `index` in model order (embedding 0, layer l's field i at 1 + 9 l + i, norm, head). */
static void s_fill(float *p, size_t n, uint64_t seed, uint64_t index, bool norm, double std)
{
    if (norm) {
        for (size_t j = 0; j < n; j++)
            p[j] = 1.0f;
        return;
    }
    uint64_t s = s_mix(seed ^ s_mix(index + 1));
    double a = std * sqrt(3.0); /* uniform [-a, a] has this standard deviation */
    for (size_t j = 0; j < n; j++) {
        s = s_mix(s);
        p[j] = (float)(a * (2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0));
    }
}

pl_status_t pl_train_master_random(const pl_train_local_cfg_t *cfg, uint64_t seed, int l0,
                                   int l1, bool first, bool last, pl_train_master_t **tm_p)
{
    pl_train_master_t *t = NULL;
    pl_st_out_t *list = NULL;
    char(*names)[PL_TRAIN_CKPT_NAME] = NULL;
    size_t n = 0;
    pl_status_t rc = s_alloc(cfg, l0, l1, first, last, &t, &list, &names, &n);
    if (rc != PL_OK)
        return rc;
    size_t k = 0;
    if (first) {
        s_fill((float *)list[k].data, s_numel(&list[k]), seed, 0, false, 0.02);
        k++;
    }
    for (int l = l0; l < l1; l++)
        for (int i = 0; i < 9; i++, k++) {
            int64_t fan_in = list[k].ndim == 2 ? list[k].shape[1] : 1;
            s_fill((float *)list[k].data, s_numel(&list[k]), seed, 1 + 9 * (uint64_t)l + (uint64_t)i,
                   list[k].ndim == 1, 1.0 / sqrt((double)fan_in));
        }
    if (last) {
        uint64_t base = 1 + 9 * (uint64_t)cfg->n_layers;
        s_fill((float *)list[k].data, s_numel(&list[k]), seed, base, true, 0);
        s_fill((float *)list[k + 1].data, s_numel(&list[k + 1]), seed, base + 1, false,
               1.0 / sqrt((double)cfg->dims.hidden));
    }
    free(list);
    free(names);
    *tm_p = t;
    return PL_OK;
}
