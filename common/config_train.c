/* The training job file's schema (config_train.h): model and init, data, batch shape, optimizer,
 * schedule, replicas, checkpoints and placement, with the checks that span fields. */
#include "common/config_train.h"
#include "common/config_int.h"

#include "common/util.h"
#include "common/yaml_schema.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_inits[] = {"weights", "random", NULL};
static const char *const s_schedules[] = {"auto", "gpipe", "1f1b", "zb-h1", NULL};
static const char *const s_lr_schedules[] = {"cosine", "constant", NULL};

/* data: exactly one source. */
static bool s_post_data(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_train_t *t = base;
    (void)user;
    if (!t->data_tokens[0] == !t->data_text[0]) {
        snprintf(err, err_len, "give exactly one of 'tokens' (a file of token ids) and 'text'");
        return false;
    }
    return true;
}

static bool s_post_opt(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_train_opt_t *o = base;
    (void)user;
    if (o->min_lr > o->lr) {
        snprintf(err, err_len, "'min_lr' %g is above 'lr' %g", (double)o->min_lr, (double)o->lr);
        return false;
    }
    return true;
}

/* The fields that constrain each other; reported at the file's root. */
static bool s_post_root(void *base, void *user, char *err, size_t err_len)
{
    const pl_cfg_train_t *t = base;
    (void)user;
    if (t->micro_batch != 1) {
        snprintf(err, err_len, "'micro_batch' %d: the CPU trainer runs one sequence per "
                               "microbatch (1); raise 'global_batch' for more per step",
                 t->micro_batch);
        return false;
    }
    if (t->global_batch % t->micro_batch) {
        snprintf(err, err_len, "'global_batch' %d is not a multiple of 'micro_batch' %d",
                 t->global_batch, t->micro_batch);
        return false;
    }
    if (t->opt.warmup_steps >= t->steps && t->opt.warmup_steps > 0) {
        snprintf(err, err_len, "'optimizer.warmup_steps' %d must be below 'steps' %d",
                 t->opt.warmup_steps, t->steps);
        return false;
    }
    if (t->checkpoint_every > 0 && !t->checkpoint_dir[0]) {
        snprintf(err, err_len, "'checkpoint_every' %d needs a 'checkpoint_dir'",
                 t->checkpoint_every);
        return false;
    }
    if (t->checkpoint_every > t->steps) {
        snprintf(err, err_len, "'checkpoint_every' %d is beyond 'steps' %d", t->checkpoint_every,
                 t->steps);
        return false;
    }
    if ((t->stages ? t->stages : 1) * t->replicas > PL_CFG_MAX_NODES) {
        snprintf(err, err_len, "%d stages x %d replicas is more than %d pipeline stages",
                 t->stages, t->replicas, PL_CFG_MAX_NODES);
        return false;
    }
    if (t->resume_from[0] && t->checkpoint_dir[0] && !strcmp(t->resume_from, t->checkpoint_dir)) {
        snprintf(err, err_len, "'resume_from' and 'checkpoint_dir' are the same directory: a "
                               "checkpoint would overwrite the one being resumed");
        return false;
    }
    return true;
}

static const pl_ys_field_t s_data[] = {
    PL_CFG_STR("tokens", 0, pl_cfg_train_t, data_tokens, pl_cfg_path_resolve),
    PL_CFG_STR("text", 0, pl_cfg_train_t, data_text, pl_cfg_path_resolve),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_opt[] = {
    PL_CFG_FLOAT("lr", PL_YS_MIN_EXCL, pl_cfg_train_opt_t, lr, 0, 10, 1e-3),
    PL_CFG_FLOAT("min_lr", 0, pl_cfg_train_opt_t, min_lr, 0, 10, 0),
    PL_CFG_INT("warmup_steps", pl_cfg_train_opt_t, warmup_steps, 0, PL_CFG_TRAIN_MAX_STEPS, 0),
    PL_CFG_CHOICE("lr_schedule", pl_cfg_train_opt_t, lr_schedule, "cosine", s_lr_schedules),
    PL_CFG_FLOAT("beta1", 0, pl_cfg_train_opt_t, beta1, 0, 0.999999, 0.9),
    PL_CFG_FLOAT("beta2", 0, pl_cfg_train_opt_t, beta2, 0, 0.999999, 0.999),
    PL_CFG_FLOAT("eps", PL_YS_MIN_EXCL, pl_cfg_train_opt_t, eps, 0, 1, 1e-8),
    PL_CFG_FLOAT("weight_decay", 0, pl_cfg_train_opt_t, weight_decay, 0, 1, 0.01),
    PL_CFG_FLOAT("clip_norm", 0, pl_cfg_train_opt_t, clip_norm, 0, 1e6, 0),
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_placement[] = {
    {.key = "nodes",
     .type = PL_YS_SEQ,
     .flags = PL_YS_UNIQUE,
     .offset = offsetof(pl_cfg_train_t, nodes),
     .size = PL_CFG_NAME_MAX + 1,
     .elem = &pl_cfg_name_elem,
     .count_offset = offsetof(pl_cfg_train_t, n_nodes),
     .max_count = PL_CFG_MAX_NODES},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_fields[] = {
    PL_CFG_STR("model", PL_YS_REQUIRED, pl_cfg_train_t, model, pl_cfg_path_resolve),
    PL_CFG_CHOICE("init", pl_cfg_train_t, init, "weights", s_inits),
    {.key = "seed", .type = PL_YS_U64, .offset = offsetof(pl_cfg_train_t, seed), .def = 0},
    {.key = "data", .type = PL_YS_MAP, .flags = PL_YS_REQUIRED, .fields = s_data,
     .post = s_post_data},
    {.key = "seq_len", .type = PL_YS_INT, .flags = PL_YS_REQUIRED,
     .offset = offsetof(pl_cfg_train_t, seq_len), .min = 1, .max = PL_CFG_TRAIN_MAX_SEQ_LEN},
    PL_CFG_INT("micro_batch", pl_cfg_train_t, micro_batch, 1, PL_CFG_TRAIN_MAX_BATCH, 1),
    {.key = "global_batch", .type = PL_YS_INT, .flags = PL_YS_REQUIRED,
     .offset = offsetof(pl_cfg_train_t, global_batch), .min = 1, .max = PL_CFG_TRAIN_MAX_BATCH},
    {.key = "steps", .type = PL_YS_INT, .flags = PL_YS_REQUIRED,
     .offset = offsetof(pl_cfg_train_t, steps), .min = 1, .max = PL_CFG_TRAIN_MAX_STEPS},
    {.key = "optimizer", .type = PL_YS_MAP, .offset = offsetof(pl_cfg_train_t, opt),
     .fields = s_opt, .post = s_post_opt},
    PL_CFG_CHOICE("schedule", pl_cfg_train_t, schedule, "auto", s_schedules),
    {.key = "recompute", .type = PL_YS_BOOL, .offset = offsetof(pl_cfg_train_t, recompute),
     .def = 0},
    PL_CFG_INT("stages", pl_cfg_train_t, stages, 0, PL_CFG_MAX_NODES, 0),
    PL_CFG_INT("replicas", pl_cfg_train_t, replicas, 1, PL_CFG_TRAIN_MAX_REPLICAS, 1),
    PL_CFG_INT("checkpoint_every", pl_cfg_train_t, checkpoint_every, 0, PL_CFG_TRAIN_MAX_STEPS, 0),
    PL_CFG_STR("checkpoint_dir", 0, pl_cfg_train_t, checkpoint_dir, pl_cfg_path_resolve),
    PL_CFG_STR("resume_from", 0, pl_cfg_train_t, resume_from, pl_cfg_path_resolve),
    {.key = "placement", .type = PL_YS_MAP, .fields = s_placement},
    {.type = PL_YS_END},
};

static const pl_ys_field_t s_root = {.type = PL_YS_MAP, .fields = s_fields, .post = s_post_root};

pl_status_t pl_cfg_train_parse(const char *text, size_t len, const char *origin,
                               const char *base_dir, pl_cfg_train_t *out)
{
    return pl_cfg_schema_parse(text, len, origin, &s_root, (void *)base_dir, out, sizeof(*out));
}

static pl_status_t s_parse_cb(const char *text, size_t len, const char *origin, void *out)
{
    char base_dir[PATH_MAX];
    pl_path_dirname(origin, base_dir, sizeof(base_dir));
    return pl_cfg_train_parse(text, len, origin, base_dir, out);
}

pl_status_t pl_cfg_train_load(const char *path, pl_cfg_train_t *out)
{
    return pl_cfg_file_load(path, s_parse_cb, out);
}

/* Append `fmt` to the growing text; false when out of memory. */
static bool s_put(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool s_put(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return false;
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return true;
        }
        char *b = realloc(*buf, *cap * 2 + (size_t)n);
        if (!b)
            return false;
        *buf = b;
        *cap = *cap * 2 + (size_t)n;
    }
}

/* `"key": "value"` with the value JSON-escaped (a YAML double-quoted scalar), after a comma
 * unless *first; nothing when the value is empty. */
static bool s_put_str(char **buf, size_t *len, size_t *cap, bool *first, const char *key,
                      const char *v)
{
    if (!v[0])
        return true;
    json_t *js = json_string(v);
    char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    bool ok = q && s_put(buf, len, cap, "%s\"%s\": %s", *first ? "" : ", ", key, q);
    free(q);
    *first = false;
    return ok;
}

pl_status_t pl_cfg_train_format(const pl_cfg_train_t *t, char **text_p)
{
    size_t len = 0, cap = 1024;
    char *b = malloc(cap);
    bool top = true, data = true, later = false;
    const pl_cfg_train_opt_t *o = &t->opt;
    bool ok = b && s_put(&b, &len, &cap, "{") &&
              s_put_str(&b, &len, &cap, &top, "model", t->model) &&
              s_put_str(&b, &len, &cap, &later, "init", t->init) &&
              s_put(&b, &len, &cap, ", \"seed\": %llu, \"data\": {",
                    (unsigned long long)t->seed) &&
              s_put_str(&b, &len, &cap, &data, "tokens", t->data_tokens) &&
              s_put_str(&b, &len, &cap, &data, "text", t->data_text);
    ok = ok &&
         s_put(&b, &len, &cap,
               "}, \"seq_len\": %d, \"micro_batch\": %d, \"global_batch\": %d, \"steps\": %d, "
               "\"optimizer\": {\"lr\": %.17g, \"min_lr\": %.17g, \"warmup_steps\": %d, "
               "\"lr_schedule\": \"%s\", \"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, "
               "\"weight_decay\": %.17g, \"clip_norm\": %.17g}, \"recompute\": %s, "
               "\"stages\": %d, \"replicas\": %d, \"checkpoint_every\": %d",
               t->seq_len, t->micro_batch, t->global_batch, t->steps, (double)o->lr,
               (double)o->min_lr, o->warmup_steps, o->lr_schedule, (double)o->beta1,
               (double)o->beta2, (double)o->eps, (double)o->weight_decay, (double)o->clip_norm,
               t->recompute ? "true" : "false", t->stages, t->replicas, t->checkpoint_every) &&
         s_put_str(&b, &len, &cap, &later, "schedule", t->schedule) &&
         s_put_str(&b, &len, &cap, &later, "checkpoint_dir", t->checkpoint_dir) &&
         s_put_str(&b, &len, &cap, &later, "resume_from", t->resume_from);
    if (ok && t->n_nodes > 0) {
        ok = s_put(&b, &len, &cap, ", \"placement\": {\"nodes\": [");
        for (int i = 0; ok && i < t->n_nodes; i++) { /* names: [A-Za-z0-9_.-] */
            bool one = i == 0;
            json_t *js = json_string(t->nodes[i]);
            char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
            json_decref(js);
            ok = q && s_put(&b, &len, &cap, "%s%s", one ? "" : ", ", q);
            free(q);
        }
        ok = ok && s_put(&b, &len, &cap, "]}");
    }
    ok = ok && s_put(&b, &len, &cap, "}\n");
    if (!ok) {
        free(b);
        return pl_error(PL_ERR_NOMEM, "training job: out of memory");
    }
    *text_p = b;
    return PL_OK;
}
