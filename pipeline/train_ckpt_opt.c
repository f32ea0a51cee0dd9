/* Optimizer checkpoints (train_ckpt_opt.h): the moments through the safetensors writer and
 * reader under the checkpoint's own names, the step state as a small JSON file. */
#include "pipeline/train_ckpt_opt.h"

#include "common/train_ops.h"
#include "common/util.h"
#include "model/safetensors.h"
#include "pipeline/train_ckpt.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_NAME (PL_TRAIN_CKPT_NAME + 16)

/* The stage's tensor table and, per tensor, the two moment names. */
static pl_status_t s_table(const pl_train_local_cfg_t *cfg, pl_adamw_t *opt, int stage,
                           int n_stages, int l0, int l1, pl_st_out_t **mom_p, size_t *n_p,
                           char (**names_p)[S_NAME])
{
    if (n_stages < 1 || n_stages > 99999 || stage < 0 || stage >= n_stages || l0 < 0 ||
        l1 < l0 || l1 > cfg->n_layers)
        return pl_error(PL_ERR_INVALID, "optimizer checkpoint: stage %d of %d, layers %d..%d "
                                        "of %d",
                        stage, n_stages, l0, l1, cfg->n_layers);
    size_t cap = (size_t)(l1 - l0) * 9 + 3;
    pl_st_out_t *t = calloc(cap, sizeof(*t)), *mom = calloc(2 * cap, sizeof(*mom));
    char(*wn)[PL_TRAIN_CKPT_NAME] = calloc(cap, PL_TRAIN_CKPT_NAME);
    char(*names)[S_NAME] = calloc(2 * cap, S_NAME);
    pl_status_t rc = PL_OK;
    if (!t || !mom || !wn || !names) {
        rc = pl_error(PL_ERR_NOMEM, "optimizer checkpoint: stage %d", stage);
        goto out;
    }
    size_t n = pl_train_ckpt_stage_tensors(cfg, NULL, stage == 0, stage == n_stages - 1, l0, l1,
                                           t, wn);
    if ((size_t)pl_adamw_n_tensors(opt) != n) {
        rc = pl_error(PL_ERR_INVALID, "optimizer checkpoint: stage %d holds %d tensors, its "
                                      "layers %d..%d have %zu",
                      stage, pl_adamw_n_tensors(opt), l0, l1, n);
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        float *m, *v;
        size_t numel, want = 1;
        pl_adamw_moments(opt, (int)k, &m, &v, &numel);
        for (int d = 0; d < t[k].ndim; d++)
            want *= (size_t)t[k].shape[d];
        if (numel != want) {
            rc = pl_error(PL_ERR_INVALID, "optimizer checkpoint: %s has %zu floats in the "
                                          "optimizer, %zu in the model",
                          t[k].name, numel, want);
            goto out;
        }
        snprintf(names[2 * k], S_NAME, "%s.exp_avg", t[k].name);
        snprintf(names[2 * k + 1], S_NAME, "%s.exp_avg_sq", t[k].name);
        mom[2 * k] = (pl_st_out_t){names[2 * k], t[k].ndim, {t[k].shape[0], t[k].shape[1]}, m};
        mom[2 * k + 1] = (pl_st_out_t){names[2 * k + 1], t[k].ndim,
                                       {t[k].shape[0], t[k].shape[1]}, v};
    }
    *mom_p = mom, *n_p = 2 * n, *names_p = names;
    mom = NULL, names = NULL;
out:
    free(t);
    free(wn);
    free(mom);
    free(names);
    return rc;
}

static pl_status_t s_path(const char *dir, int stage, int n_stages, char *path, size_t len)
{
    char shard[64];
    snprintf(shard, sizeof(shard), "optimizer-%05d-of-%05d.safetensors", stage + 1, n_stages);
    return pl_path_join(dir, shard, path, len);
}

pl_status_t pl_train_ckpt_opt_write(const char *dir, const pl_train_local_cfg_t *cfg,
                                    pl_adamw_t *opt, int stage, int n_stages, int l0, int l1)
{
    pl_st_out_t *mom = NULL;
    char(*names)[S_NAME] = NULL;
    size_t n = 0;
    char path[4096];
    pl_status_t rc = s_table(cfg, opt, stage, n_stages, l0, l1, &mom, &n, &names);
    if (rc == PL_OK && (rc = s_path(dir, stage, n_stages, path, sizeof(path))) == PL_OK)
        rc = pl_st_write(path, mom, n);
    free(mom);
    free(names);
    return rc;
}

pl_status_t pl_train_ckpt_opt_read(const char *dir, const pl_train_local_cfg_t *cfg,
                                   pl_adamw_t *opt, int stage, int n_stages, int l0, int l1)
{
    pl_st_out_t *mom = NULL;
    char(*names)[S_NAME] = NULL;
    size_t n = 0;
    char path[4096];
    pl_st_file_t *f = NULL;
    const unsigned char *data;
    const pl_st_entry_t **at = NULL;
    pl_train_state_t state;
    pl_status_t rc = s_table(cfg, opt, stage, n_stages, l0, l1, &mom, &n, &names);
    if (rc != PL_OK || (rc = s_path(dir, stage, n_stages, path, sizeof(path))) != PL_OK ||
        (rc = pl_train_ckpt_state_read(dir, &state)) != PL_OK || (rc = pl_st_open(path, &f)) != PL_OK ||
        (rc = pl_st_data(f, &data)) != PL_OK)
        goto out;
    if (state.n_stages != n_stages) {
        rc = pl_error(PL_ERR_INVALID, "%s: the checkpoint was written by %d stages, this run "
                                      "has %d",
                      dir, state.n_stages, n_stages);
        goto out;
    }
    if (!(at = calloc(n, sizeof(*at)))) {
        rc = pl_error(PL_ERR_NOMEM, "%s", path);
        goto out;
    }
    /* every moment found and of the right shape before any is copied */
    for (size_t k = 0; k < n; k++) {
        for (size_t e = 0; e < f->hdr.n_entries && !at[k]; e++)
            if (!strcmp(f->hdr.entries[e].name, mom[k].name))
                at[k] = &f->hdr.entries[e];
        bool shape_ok = at[k] && at[k]->ndim == mom[k].ndim && at[k]->dtype == PL_DT_F32;
        for (int d = 0; shape_ok && d < mom[k].ndim; d++)
            shape_ok = at[k]->shape[d] == mom[k].shape[d];
        if (!shape_ok) {
            rc = pl_error(PL_ERR_INVALID, "%s: tensor %s %s", path, mom[k].name,
                          at[k] ? "is not F32 of the stage's shape" : "is missing");
            goto out;
        }
    }
    if ((rc = pl_adamw_set_steps(opt, state.step)) != PL_OK) {
        rc = pl_error_prefix(rc, "%s: ", dir);
        goto out;
    }
    for (size_t k = 0; k < n; k++)
        memcpy((float *)mom[k].data, data + at[k]->begin, (size_t)(at[k]->end - at[k]->begin));
out:
    free(at);
    pl_st_close(&f);
    free(mom);
    free(names);
    return rc;
}

pl_status_t pl_train_ckpt_stage_readable(const char *dir, int stage, int n_stages)
{
    char names[4][64], path[4096];
    snprintf(names[0], sizeof(names[0]), "trainer_state.json");
    snprintf(names[1], sizeof(names[1]), "config.json");
    snprintf(names[2], sizeof(names[2]), "model.safetensors.index.json");
    pl_train_ckpt_shard_name(stage, n_stages, names[3], sizeof(names[3]));
    for (int i = 0; i <= 4; i++) {
        pl_status_t rc = i < 4 ? pl_path_join(dir, names[i], path, sizeof(path))
                               : s_path(dir, stage, n_stages, path, sizeof(path));
        if (rc)
            return rc;
        if (access(path, R_OK) != 0)
            return pl_error(PL_ERR_NOT_FOUND, "resume_from: %s is not readable on this node "
                            "(%s): each stage writes its part of a checkpoint on its own node, "
                            "so the nodes must share one file system, or the checkpoint be "
                            "copied to each of them", path, strerror(errno));
    }
    return PL_OK;
}

pl_status_t pl_train_ckpt_state_write(const char *dir, const pl_train_state_t *st)
{
    char path[4096], tmp[4200];
    pl_status_t rc = pl_path_join(dir, "trainer_state.json", path, sizeof(path));
    if (rc != PL_OK)
        return rc;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    json_t *o = json_pack("{s:i, s:i, s:I, s:f}", "step", st->step, "n_stages", st->n_stages,
                          "data_step", (json_int_t)st->data_step, "lr", st->lr);
    json_t *split = o && st->split[0] ? json_array() : NULL;
    for (int i = 0; split && i < st->n_stages && i < PL_TRAIN_MAX_STAGES; i++)
        json_array_append_new(split, json_integer(st->split[i]));
    if (split)
        json_object_set_new(o, "split", split);
    if (o && st->schedule[0])
        json_object_set_new(o, "schedule", json_string(st->schedule));
    if (!o)
        return pl_error(PL_ERR_NOMEM, "%s", path);
    int bad = json_dump_file(o, tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (bad || rename(tmp, path) != 0) {
        rc = pl_error(PL_ERR_IO, "%s: %s", bad ? tmp : path, strerror(errno));
        remove(tmp);
        return rc;
    }
    return PL_OK;
}

static pl_status_t s_int(const json_t *o, const char *path, const char *key, int64_t lo,
                         int64_t hi, int64_t *v)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
        return pl_error(PL_ERR_INVALID, "%s: field '%s' must be an integer in %lld..%lld", path,
                        key, (long long)lo, (long long)hi);
    *v = json_integer_value(x);
    return PL_OK;
}

pl_status_t pl_train_ckpt_state_read(const char *dir, pl_train_state_t *st)
{
    char path[4096];
    pl_status_t rc = pl_path_join(dir, "trainer_state.json", path, sizeof(path));
    if (rc != PL_OK)
        return rc;
    json_error_t err;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!o)
        return pl_error(PL_ERR_INVALID, "%s:%d: %s", path, err.line, err.text);
    int64_t step = 0, n_stages = 0, data_step = 0;
    const json_t *lr = json_object_get(o, "lr");
    if (!json_is_object(o))
        rc = pl_error(PL_ERR_INVALID, "%s: expected an object", path);
    else if ((rc = s_int(o, path, "step", 0, INT32_MAX, &step)) == PL_OK &&
             (rc = s_int(o, path, "n_stages", 1, 99999, &n_stages)) == PL_OK &&
             (rc = s_int(o, path, "data_step", 0, INT64_MAX, &data_step)) == PL_OK &&
             !json_is_number(lr))
        rc = pl_error(PL_ERR_INVALID, "%s: field 'lr' must be a number", path);
    pl_train_state_t v = {.step = (int)step, .n_stages = (int)n_stages, .data_step = data_step,
                          .lr = json_number_value(lr)};
    const json_t *split = rc == PL_OK ? json_object_get(o, "split") : NULL;
    if (split && (!json_is_array(split) || json_array_size(split) != (size_t)n_stages ||
                  n_stages > PL_TRAIN_MAX_STAGES))
        rc = pl_error(PL_ERR_INVALID, "%s: field 'split' must be %lld layer counts", path,
                      (long long)n_stages);
    for (size_t i = 0; rc == PL_OK && split && i < json_array_size(split); i++) {
        const json_t *e = json_array_get(split, i);
        if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 4096)
            rc = pl_error(PL_ERR_INVALID, "%s: field 'split': entry %zu is not 1..4096", path, i);
        else
            v.split[i] = (int)json_integer_value(e);
    }
    const json_t *sched = rc == PL_OK ? json_object_get(o, "schedule") : NULL;
    pl_train_kind_t kind;
    if (sched && (!json_is_string(sched) || json_string_length(sched) >= sizeof(v.schedule) ||
                  pl_train_kind_parse(json_string_value(sched), &kind)))
        rc = pl_error(PL_ERR_INVALID, "%s: field 'schedule' must name a schedule", path);
    else if (sched)
        snprintf(v.schedule, sizeof(v.schedule), "%s", pl_train_kind_name(kind));
    if (rc == PL_OK)
        *st = v;
    json_decref(o);
    return rc;
}
