/* A model's stages run back to back in one thread on one device, for the in-process runners:
 * loading by layer counts, one message through all of them, unloading. */
#include "pipeline/local_chain.h"

#include "common/util.h"
#include "pipeline/gen.h"

#include <stdlib.h>
#include <string.h>

pl_status_t pl_local_chain_load(pl_local_chain_t *c, pl_be_device_t *dev, pl_model_t *model,
                                const int *counts, int n_stages, int max_seqs, int max_ctx,
                                int max_tokens, pl_act_dtype_t wire)
{
    const pl_model_config_t *cfg = pl_model_config(model);
    int n = counts ? n_stages : 1, first = 0, total = 0;
    pl_status_t st;
    memset(c, 0, sizeof(*c));
    if (n < 1 || n > PL_LOCAL_CHAIN_MAX_STAGES)
        return pl_error(PL_ERR_RANGE, "%d stages: between 1 and %d allowed", n,
                        PL_LOCAL_CHAIN_MAX_STAGES);
    for (int i = 0; counts && i < n; i++)
        total += counts[i];
    if (counts && total != cfg->n_layers)
        return pl_error(PL_ERR_INVALID, "partition covers %d layers, the model has %d", total,
                        cfg->n_layers);
    c->wire = wire;
    c->hidden = cfg->hidden;
    for (int i = 0; i < n; i++) {
        int k = counts ? counts[i] : cfg->n_layers;
        pl_be_stage_params_t sp = {.first_layer = first,
                                   .last_layer = first + k - 1,
                                   .has_embed = i == 0,
                                   .has_head = i == n - 1,
                                   .max_seqs = max_seqs,
                                   .max_ctx = max_ctx,
                                   .max_tokens = max_tokens};
        first += k;
        if ((st = pl_be_stage_load(dev, model, &sp, &c->stage[i]))) {
            pl_error_prefix(st, "stage %d: ", i);
            goto err;
        }
        c->n_stages = i + 1;
    }
    size_t act = PL_MAX((size_t)max_tokens * cfg->hidden, (size_t)max_seqs * cfg->vocab);
    c->a = malloc(act * sizeof(float));
    c->b = malloc(act * sizeof(float));
    c->ints = malloc(3 * (size_t)max_seqs * sizeof(int));
    if (!c->a || !c->b || !c->ints) {
        st = pl_error(PL_ERR_NOMEM, "out of memory");
        goto err;
    }
    return PL_OK;
err:
    pl_local_chain_unload(c);
    return st;
}

pl_status_t pl_local_chain_run(pl_local_chain_t *c, const pl_act_hdr_t *hdr,
                               const pl_act_seq_t *seqs, const int32_t *tokens, float **out_p)
{
    pl_be_batch_t batch;
    const void *in = tokens;
    float *out = c->a;
    double t0 = pl_now();
    pl_gen_batch(hdr, seqs, c->ints, &batch);
    for (int i = 0; i < c->n_stages; i++) {
        pl_status_t st = pl_be_stage_forward(c->stage[i], &batch, in, out);
        if (st)
            return pl_error_prefix(st, "stage %d: ", i);
        if (i + 1 < c->n_stages)
            pl_act_round(c->wire, out, (size_t)hdr->n_tokens * (size_t)c->hidden);
        in = out;
        out = out == c->a ? c->b : c->a;
    }
    c->compute_s += pl_now() - t0;
    *out_p = (float *)in;
    return PL_OK;
}

void pl_local_chain_free_seq(pl_local_chain_t *c, int slot)
{
    for (int i = 0; i < c->n_stages; i++)
        pl_be_stage_free_seq(c->stage[i], slot);
}

void pl_local_chain_unload(pl_local_chain_t *c)
{
    for (int i = 0; i < c->n_stages; i++)
        pl_be_stage_unload(&c->stage[i]);
    c->n_stages = 0;
    free(c->a);
    free(c->b);
    free(c->ints);
    c->a = c->b = NULL;
    c->ints = NULL;
}
