/* Training on the wire: a training job's part of the job spec (the job file's own schema reads
 * it back, so the file and the message are checked by one set of rules) and TRAIN_STEP. */
#include "common/json.h"
#include "common/train_ops.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_TRAIN_TEXT (64u << 10) /* bytes of a training job's text in the spec */

pl_status_t pl_job_train_encode(const pl_job_train_t *t, json_t *spec_body)
{
    char *text;
    pl_status_t st = pl_cfg_train_format(&t->cfg, &text);
    if (st)
        return st;
    json_t *js = json_string(text);
    free(text);
    if (!js || json_object_set_new(spec_body, "train", js))
        return pl_error(PL_ERR_INVALID, "train: cannot encode the training job");
    if (t->n_split == 0)
        return PL_OK;
    json_t *split = json_array();
    for (int i = 0; split && i < t->n_split; i++)
        if (json_array_append_new(split, json_integer(t->split[i]))) {
            json_decref(split);
            split = NULL;
        }
    json_t *allow = t->n_allow ? json_array() : NULL;
    for (int i = 0; allow && i < t->n_allow; i++)
        if (json_array_append_new(allow, json_string(t->allow[i]))) {
            json_decref(allow);
            allow = NULL;
        }
    if (!split || (t->n_allow && !allow)) {
        json_decref(split);
        json_decref(allow);
        return pl_error(PL_ERR_INVALID, "train_plan: cannot encode");
    }
    json_t *plan = json_pack("{s:s, s:o, s:o*}", "schedule",
                             pl_train_kind_name((pl_train_kind_t)t->kind), "split", split, "allow",
                             allow); /* steals both, also on failure */
    if (!plan || json_object_set_new(spec_body, "train_plan", plan))
        return pl_error(PL_ERR_INVALID, "train_plan: cannot encode");
    return PL_OK;
}

/* A path field of the job, which must be absolute on the wire (pipectl resolved it). */
static pl_status_t s_abs(const char *key, const char *path)
{
    if (path[0] && path[0] != '/')
        return pl_error(PL_ERR_INVALID, "field 'train': '%s' is not an absolute path", key);
    return PL_OK;
}

/* The coordinator's decisions: the schedule by name and the layers of each stage. */
static pl_status_t s_plan(const json_t *plan, pl_job_train_t *t)
{
    char kind[16];
    json_t *split;
    pl_train_kind_t k;
    pl_status_t st;
    if (!json_is_object(plan))
        return pl_error(PL_ERR_INVALID, "field 'train_plan': expected an object");
    if ((st = pl_json_str(plan, "schedule", kind, sizeof(kind) - 1)) ||
        (st = pl_train_kind_parse(kind, &k)) ||
        (st = pl_json_array(plan, "split", PL_CFG_MAX_NODES, &split)))
        return pl_error_prefix(st, "train_plan: ");
    if (json_array_size(split) == 0)
        return pl_error(PL_ERR_INVALID, "field 'train_plan.split': no stages");
    for (size_t i = 0; i < json_array_size(split); i++) {
        json_t *v = json_array_get(split, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096)
            return pl_error(PL_ERR_INVALID,
                            "field 'train_plan.split': entry %zu is not a layer count 1..4096", i);
        t->split[i] = (int)json_integer_value(v);
    }
    json_t *allow = NULL;
    if (json_object_get(plan, "allow") &&
        (st = pl_json_array(plan, "allow", PL_CFG_MAX_MODEL_DIRS, &allow)))
        return pl_error_prefix(st, "train_plan: ");
    for (size_t i = 0; i < json_array_size(allow); i++) {
        json_t *v = json_array_get(allow, i);
        size_t n = json_string_length(v);
        if (!json_is_string(v) || n == 0 || n >= PATH_MAX || json_string_value(v)[0] != '/' ||
            strlen(json_string_value(v)) != n)
            return pl_error(PL_ERR_INVALID, "field 'train_plan.allow': entry %zu is not an "
                            "absolute path", i);
        memcpy(t->allow[i], json_string_value(v), n + 1);
    }
    t->n_allow = (int)json_array_size(allow);
    t->n_split = (int)json_array_size(split);
    t->kind = (int)k;
    return PL_OK;
}

pl_status_t pl_job_train_decode(const json_t *body, pl_job_spec_t *spec)
{
    const json_t *text = json_object_get(body, "train"), *plan = json_object_get(body, "train_plan");
    pl_status_t st;
    if (!text || json_is_null(text)) {
        if (plan && !json_is_null(plan))
            return pl_error(PL_ERR_INVALID, "field 'train_plan': without 'train'");
        return PL_OK;
    }
    size_t len = json_string_length(text);
    if (!json_is_string(text) || len == 0 || len > S_MAX_TRAIN_TEXT ||
        strlen(json_string_value(text)) != len)
        return pl_error(PL_ERR_INVALID, "field 'train': expected the training job's text (1 to "
                                        "%u bytes, no NUL)",
                        S_MAX_TRAIN_TEXT);
    pl_job_train_t *t = calloc(1, sizeof(*t));
    if (!t)
        return pl_error(PL_ERR_NOMEM, "train: out of memory");
    t->kind = -1;
    if ((st = pl_cfg_train_parse(json_string_value(text), len, "field 'train'", NULL, &t->cfg)) ||
        (st = s_abs("model", t->cfg.model)) || (st = s_abs("data.tokens", t->cfg.data_tokens)) ||
        (st = s_abs("data.text", t->cfg.data_text)) ||
        (st = s_abs("checkpoint_dir", t->cfg.checkpoint_dir)) ||
        (st = s_abs("resume_from", t->cfg.resume_from)))
        goto err;
    if (strcmp(t->cfg.model, spec->model)) {
        st = pl_error(PL_ERR_INVALID, "field 'train': model '%.200s' is not the job's '%.200s'",
                      t->cfg.model, spec->model);
        goto err;
    }
    if (plan && !json_is_null(plan) && (st = s_plan(plan, t)))
        goto err;
    spec->train = t;
    return PL_OK;
err:
    free(t);
    return st;
}

pl_status_t pl_msg_train_step_encode(const pl_msg_train_step_t *m, json_t **body_p)
{
    return pl_msg_int_done(
        json_pack("{s:I, s:i, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:b}", "job",
                  (json_int_t)m->job, "stage", m->stage, "epoch", (json_int_t)m->epoch, "step",
                  m->step, "loss", m->loss, "grad_norm", m->grad_norm, "lr", m->lr, "busy_s",
                  m->busy_s, "wait_s", m->wait_s, "wall_s", m->wall_s, "peak_stash_bytes",
                  (json_int_t)m->peak_stash_bytes, "tokens", (json_int_t)m->tokens, "checkpoint",
                  m->checkpoint),
        "TRAIN_STEP", body_p);
}

pl_status_t pl_msg_train_step_decode(const json_t *body, pl_msg_train_step_t *out)
{
    pl_msg_train_step_t m = {0};
    int64_t step, stash, tokens;
    pl_status_t st;
    if ((st = pl_msg_int_ids(body, 0, &m.job, &m.stage, &m.epoch)) ||
        (st = pl_json_int(body, "step", 1, PL_CFG_TRAIN_MAX_STEPS, &step)) ||
        (st = pl_json_num(body, "loss", 0, 1e6, &m.loss)) ||
        (st = pl_json_num(body, "grad_norm", 0, 1e30, &m.grad_norm)) ||
        (st = pl_json_num(body, "lr", 0, 10, &m.lr)) ||
        (st = pl_json_num(body, "busy_s", 0, 1e7, &m.busy_s)) ||
        (st = pl_json_num(body, "wait_s", 0, 1e7, &m.wait_s)) ||
        (st = pl_json_num(body, "wall_s", 0, 1e7, &m.wall_s)) ||
        (st = pl_json_int(body, "peak_stash_bytes", 0, INT64_MAX, &stash)) ||
        (st = pl_json_int(body, "tokens", 0, INT64_MAX, &tokens)) ||
        (st = pl_json_bool_opt(body, "checkpoint", &m.checkpoint)))
        return st;
    if (m.busy_s > m.wall_s * 1.001 + 1e-3 || m.wait_s > m.wall_s * 1.001 + 1e-3)
        return pl_error(PL_ERR_INVALID, "field 'wall_s': %g s is less than the step's busy %g s "
                                        "or wait %g s",
                        m.wall_s, m.busy_s, m.wait_s);
    m.step = (int)step;
    m.peak_stash_bytes = stash;
    m.tokens = tokens;
    *out = m;
    return PL_OK;
}
