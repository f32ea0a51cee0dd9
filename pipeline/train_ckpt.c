/* Training checkpoints (train_ckpt.h): a stage's tensors named as Hugging Face Llama names them,
 * written by model/'s safetensors writer; the index lists every stage's. */
#include "pipeline/train_ckpt.h"

#include "common/util.h"
#include "model/safetensors_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NAME PL_TRAIN_CKPT_NAME
static const char *const s_layer_names[9] = {
    "input_layernorm",       "self_attn.q_proj", "self_attn.k_proj",
    "self_attn.v_proj",      "self_attn.o_proj", "post_attention_layernorm",
    "mlp.gate_proj",         "mlp.up_proj",      "mlp.down_proj"};

size_t pl_train_ckpt_stage_tensors(const pl_train_local_cfg_t *c, const pl_train_weights_t *w,
                              bool first, bool last, int l0, int l1, pl_st_out_t *out,
                              char (*names)[S_NAME])
{
    const pl_cpu_tdims_t *d = &c->dims;
    int64_t H = d->hidden, Q = (int64_t)d->n_heads * d->head_dim,
            KV = (int64_t)d->n_kv * d->head_dim, I = d->inter;
    size_t k = 0;
    if (first) {
        snprintf(names[k], S_NAME, "model.embed_tokens.weight");
        out[k] = (pl_st_out_t){names[k], 2, {c->vocab, H}, w ? w->embed : NULL};
        k++;
    }
    for (int l = l0; l < l1; l++) {
        const int64_t shapes[9][2] = {{H, 0}, {Q, H}, {KV, H}, {KV, H}, {H, Q},
                                      {H, 0}, {I, H}, {I, H},  {H, I}};
        for (int i = 0; i < 9; i++, k++) {
            snprintf(names[k], S_NAME, "model.layers.%d.%s.weight", l, s_layer_names[i]);
            float *data = w ? *pl_cpu_tlayer_field(&w->layers[l], i) : NULL;
            out[k] = (pl_st_out_t){names[k], shapes[i][1] ? 2 : 1, {shapes[i][0], shapes[i][1]},
                                   data};
        }
    }
    if (last) {
        snprintf(names[k], S_NAME, "model.norm.weight");
        out[k] = (pl_st_out_t){names[k], 1, {H}, w ? w->final_norm : NULL};
        k++;
        snprintf(names[k], S_NAME, "lm_head.weight");
        out[k] = (pl_st_out_t){names[k], 2, {c->vocab, H}, w ? w->head : NULL};
        k++;
    }
    return k;
}

void pl_train_ckpt_shard_name(int stage, int n_stages, char *out, size_t len)
{
    snprintf(out, len, "model-%05d-of-%05d.safetensors", stage + 1, n_stages);
}

pl_status_t pl_train_ckpt_stage_write(const char *dir, const pl_train_local_cfg_t *cfg,
                                      const pl_train_weights_t *w, int stage, int n_stages, int l0,
                                      int l1)
{
    if (n_stages < 1 || n_stages > 99999 || stage < 0 || stage >= n_stages || l0 < 0 ||
        l1 < l0 || l1 > cfg->n_layers)
        return pl_error(PL_ERR_INVALID, "checkpoint: stage %d of %d, layers %d..%d of %d", stage,
                        n_stages, l0, l1, cfg->n_layers);
    size_t cap = (size_t)(l1 - l0) * 9 + 3;
    pl_st_out_t *t = calloc(cap, sizeof(*t));
    char(*names)[S_NAME] = calloc(cap, S_NAME);
    char shard[64], path[4096];
    pl_status_t rc;
    if (!t || !names) {
        rc = pl_error(PL_ERR_NOMEM, "checkpoint: stage %d", stage);
        goto out;
    }
    size_t n = pl_train_ckpt_stage_tensors(cfg, w, stage == 0, stage == n_stages - 1, l0, l1, t,
                                           names);
    pl_train_ckpt_shard_name(stage, n_stages, shard, sizeof(shard));
    if ((rc = pl_path_join(dir, shard, path, sizeof(path))) == PL_OK)
        rc = pl_st_write(path, t, n);
out:
    free(t);
    free(names);
    return rc;
}

static pl_status_t s_copy(const char *from_dir, const char *to_dir, const char *name)
{
    char src[4096], dst[4096], tmp[4200], buf[65536];
    pl_status_t rc;
    if ((rc = pl_path_join(from_dir, name, src, sizeof(src))) != PL_OK ||
        (rc = pl_path_join(to_dir, name, dst, sizeof(dst))) != PL_OK)
        return rc;
    snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
    FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    if (!in || !out) {
        rc = pl_error(PL_ERR_IO, "checkpoint: %s: %s", in ? tmp : src, strerror(errno));
        goto out;
    }
    for (size_t k; (k = fread(buf, 1, sizeof(buf), in)) > 0;)
        if (fwrite(buf, 1, k, out) != k) {
            rc = pl_error(PL_ERR_IO, "checkpoint: %s: write: %s", tmp, strerror(errno));
            goto out;
        }
    if (ferror(in))
        rc = pl_error(PL_ERR_IO, "checkpoint: %s: read: %s", src, strerror(errno));
out:
    if (in)
        fclose(in);
    if (out && fclose(out) != 0 && rc == PL_OK)
        rc = pl_error(PL_ERR_IO, "checkpoint: %s: close: %s", tmp, strerror(errno));
    if (out && rc == PL_OK && rename(tmp, dst) != 0)
        rc = pl_error(PL_ERR_IO, "checkpoint: %s: rename: %s", dst, strerror(errno));
    if (out && rc != PL_OK)
        remove(tmp);
    return rc;
}

pl_status_t pl_train_ckpt_index_write(const char *dir, const pl_train_local_cfg_t *cfg,
                                      const int *counts, int n_stages, const char *model_dir)
{
    if (n_stages < 1 || n_stages > 99999)
        return pl_error(PL_ERR_INVALID, "checkpoint: %d stages", n_stages);
    size_t cap = (size_t)cfg->n_layers * 9 + 3;
    pl_st_out_t *t = calloc(cap, sizeof(*t));
    char(*names)[S_NAME] = calloc(cap, S_NAME), (*shards)[64] = calloc(cap, 64);
    const char **np = calloc(cap, sizeof(char *)), **sp = calloc(cap, sizeof(char *));
    pl_status_t rc = PL_OK;
    uint64_t total = 0;
    size_t n = 0;
    if (!t || !names || !shards || !np || !sp) {
        rc = pl_error(PL_ERR_NOMEM, "checkpoint index");
        goto out;
    }
    for (int s = 0, l = 0; s < n_stages; l += counts[s], s++) {
        if (counts[s] < 0 || l + counts[s] > cfg->n_layers ||
            (s == n_stages - 1 && l + counts[s] != cfg->n_layers)) {
            rc = pl_error(PL_ERR_INVALID, "checkpoint index: stage %d's %d layers do not fit "
                                          "the model's %d",
                          s, counts[s], cfg->n_layers);
            goto out;
        }
        size_t k = pl_train_ckpt_stage_tensors(cfg, NULL, s == 0, s == n_stages - 1, l, l + counts[s],
                                   t + n, names + n);
        for (size_t i = n; i < n + k; i++) {
            pl_train_ckpt_shard_name(s, n_stages, shards[i], 64);
            np[i] = names[i], sp[i] = shards[i];
            uint64_t e = 4;
            for (int dd = 0; dd < t[i].ndim; dd++)
                e *= (uint64_t)t[i].shape[dd];
            total += e;
        }
        n += k;
    }
    if ((rc = pl_st_index_write(dir, np, sp, n, total)) == PL_OK && model_dir)
        rc = s_copy(model_dir, dir, "config.json");
out:
    free(t), free(names), free(shards), free(np), free(sp);
    return rc;
}
