/* A training job's progress as its state db row keeps it (coord_store.c's `train` column): the
 * loss curve so far and the last whole checkpoint, written at each checkpoint, and read back
 * with every field checked against the job's spec (the file is outside input). */
#include "common/json.h"
#include "common/util.h"
#include "daemon/coord_train.h"

#include <math.h>
#include <stdlib.h>

#define S_MAX_CURVE (1 << 20) /* coord_train.c's: steps whose loss is kept */

void pl_coord_train_free(pl_coord_job_t *j)
{
    if (!j->train)
        return;
    free(j->train->losses);
    free(j->train);
    j->train = NULL;
}

json_t *pl_coord_train_row(const pl_coord_job_t *j)
{
    const pl_coord_train_t *p = j->train;
    json_t *losses = json_array();
    for (int k = p->first_step; losses && k < p->step && k < S_MAX_CURVE; k++)
        if (json_array_append_new(losses, json_real(p->losses[k]))) {
            json_decref(losses);
            losses = NULL;
        }
    if (!losses)
        return NULL;
    /* the doubles go out with 17 significant digits: they come back to the bit */
    return json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:I, s:o}", "first_step", p->first_step,
                     "step", p->step, "ckpt_step", p->ckpt_step, "loss", p->loss, "grad_norm",
                     p->grad_norm, "lr", p->lr, "tokens", (json_int_t)p->tokens, "losses",
                     losses);
}

pl_status_t pl_coord_train_from_row(const json_t *row, pl_coord_job_t *j)
{
    int steps = j->spec.train->cfg.steps;
    int64_t first, step, ckpt, tokens;
    double loss, gn, lr;
    json_t *losses;
    pl_status_t st;
    if (!json_is_object(row))
        return pl_error(PL_ERR_INVALID, "field 'train': expected an object");
    if ((st = pl_json_int(row, "first_step", 0, steps, &first)) ||
        (st = pl_json_int(row, "step", first, steps, &step)) ||
        (st = pl_json_int(row, "ckpt_step", -1, step, &ckpt)) ||
        (st = pl_json_num(row, "loss", 0, 1e6, &loss)) ||
        (st = pl_json_num(row, "grad_norm", 0, 1e30, &gn)) ||
        (st = pl_json_num(row, "lr", 0, 10, &lr)) ||
        (st = pl_json_int(row, "tokens", 0, INT64_MAX, &tokens)) ||
        (st = pl_json_array(row, "losses", S_MAX_CURVE, &losses)))
        return pl_error_prefix(st, "field 'train': ");
    if (ckpt != -1 && ckpt <= first)
        return pl_error(PL_ERR_INVALID, "field 'train.ckpt_step': %lld is not after the first "
                        "step %lld", (long long)ckpt, (long long)first);
    size_t n = (size_t)(PL_MIN(step, S_MAX_CURVE) - PL_MIN(first, S_MAX_CURVE));
    if (json_array_size(losses) != n)
        return pl_error(PL_ERR_INVALID, "field 'train.losses': %zu losses for steps %lld..%lld",
                        json_array_size(losses), (long long)first + 1, (long long)step);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(losses, i);
        if (!json_is_real(v) || !isfinite(json_real_value(v)) || json_real_value(v) < 0 ||
            json_real_value(v) > 1e6)
            return pl_error(PL_ERR_INVALID, "field 'train.losses': entry %zu is not a loss", i);
    }
    pl_coord_train_t *p = calloc(1, sizeof(*p));
    if (!p || !(p->losses = malloc((size_t)PL_MAX(1, PL_MIN(steps, S_MAX_CURVE)) *
                                   sizeof(double)))) {
        free(p);
        return pl_error(PL_ERR_NOMEM, "out of memory");
    }
    *p = (pl_coord_train_t){.first_step = (int)first, .run_from = (int)first, .step = (int)step,
                            .loss = loss, .grad_norm = gn, .lr = lr, .tokens = tokens,
                            .losses = p->losses, .ckpt_step = (int)ckpt};
    for (size_t i = 0; i < n; i++)
        p->losses[first + (int64_t)i] = json_real_value(json_array_get(losses, i));
    for (int i = 0; i < PL_COORD_MAX_STAGES; i++)
        p->stages[i] = (pl_coord_train_stage_t){.step = (int)step, .ckpt_step = (int)ckpt};
    pl_coord_train_free(j);
    j->train = p;
    return PL_OK;
}

