/* Loading a tokenizer (tokenizer.json's model, added tokens, normalizer, pre-tokenizer, post-
 * processor, decoder; tokenizer_config.json's BOS/EOS and chat template) and encode / decode. */
#include "model/tokenizer_impl.h"

#include "common/json.h"
#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest id named by the vocabulary or the added tokens, so every table can be sized first. */
static pl_status_t s_count_ids(const json_t *root, int *n_ids)
{
    const json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab"), *v;
    const json_t *added = json_object_get(root, "added_tokens");
    const char *key;
    size_t i;
    int64_t max = -1;

    if (!json_is_object(vocab))
        return pl_error(PL_ERR_INVALID, "model.vocab: missing or not an object");
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= PL_TOKENIZER_MAX_VOCAB)
            return pl_error(PL_ERR_INVALID, "model.vocab['%s']: not an id in [0, %d)", key,
                            PL_TOKENIZER_MAX_VOCAB);
        max = PL_MAX(max, json_integer_value(v));
    }
    if (json_is_array(added)) {
        json_array_foreach(added, i, v) {
            const json_t *id = json_object_get(v, "id");
            if (!json_is_integer(id) || json_integer_value(id) < 0 ||
                json_integer_value(id) >= PL_TOKENIZER_MAX_VOCAB)
                return pl_error(PL_ERR_INVALID, "added_tokens[%zu].id: not an id in [0, %d)", i,
                                PL_TOKENIZER_MAX_VOCAB);
            max = PL_MAX(max, json_integer_value(id));
        }
    }
    if (max < 0)
        return pl_error(PL_ERR_INVALID, "model.vocab: empty");
    *n_ids = (int)max + 1;
    return PL_OK;
}

static pl_status_t s_model(pl_tokenizer_t *t, const json_t *root)
{
    const json_t *model = json_object_get(root, "model");
    const char *type = NULL;

    if (!json_is_object(model))
        return pl_error(PL_ERR_INVALID, "model: missing or not an object");
    if (pl_json_str_opt(model, "type", 64, &type) || !type)
        return pl_error(PL_ERR_INVALID, "model.type: missing or not a string");
    if (strcmp(type, "BPE") != 0)
        return pl_error(PL_ERR_UNSUPPORTED, "model type '%s' is not supported (only BPE)", type);
    return pl_tok_bpe_load(t, model);
}

/* TemplateProcessing's single sequence: the special ids before and after $A. */
static pl_status_t s_template(pl_tokenizer_t *t, const json_t *pp)
{
    const json_t *single = json_object_get(pp, "single"), *specials =
        json_object_get(pp, "special_tokens"), *item;
    bool after = false;
    size_t i;

    if (!json_is_array(single))
        return pl_error(PL_ERR_INVALID, "post_processor.single: not an array");
    json_array_foreach(single, i, item) {
        const json_t *sp = json_object_get(item, "SpecialToken"), *ids, *idv;
        const char *name;
        size_t k;
        if (json_object_get(item, "Sequence")) {
            after = true;
            continue;
        }
        name = json_string_value(json_object_get(sp, "id"));
        ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return pl_error(PL_ERR_INVALID, "post_processor.single[%zu]: not a Sequence or a "
                                            "SpecialToken listed in special_tokens", i);
        json_array_foreach(ids, k, idv) {
            int *n = after ? &t->n_suffix : &t->n_prefix;
            int *list = after ? t->suffix : t->prefix;
            if (!json_is_integer(idv) || json_integer_value(idv) < 0 ||
                json_integer_value(idv) >= t->n_ids)
                return pl_error(PL_ERR_INVALID, "post_processor: special token '%s': id out of "
                                                "range", name);
            if (*n == PL_TOK_MAX_AFFIX)
                return pl_error(PL_ERR_UNSUPPORTED, "post_processor: more than %d special tokens "
                                                    "on one side", PL_TOK_MAX_AFFIX);
            list[(*n)++] = (int)json_integer_value(idv);
        }
    }
    return PL_OK;
}

static pl_status_t s_post(pl_tokenizer_t *t, const json_t *pp)
{
    const char *type = NULL;
    if (!pp || json_is_null(pp))
        return PL_OK;
    if (!json_is_object(pp) || pl_json_str_opt(pp, "type", 64, &type) || !type)
        return pl_error(PL_ERR_INVALID, "post_processor: not an object with a type");
    if (strcmp(type, "ByteLevel") == 0)
        return PL_OK; /* only offsets change */
    if (strcmp(type, "TemplateProcessing") == 0)
        return s_template(t, pp);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(pp, "processors"), *e;
        size_t i;
        pl_status_t st;
        if (!json_is_array(list))
            return pl_error(PL_ERR_INVALID, "post_processor Sequence: processors is not an array");
        json_array_foreach(list, i, e) {
            if ((st = s_post(t, e)))
                return st;
        }
        return PL_OK;
    }
    return pl_error(PL_ERR_UNSUPPORTED, "post_processor type '%s' is not supported", type);
}

/* bos_token / eos_token: a string, an AddedToken object {"content": ...}, or null. */
static pl_status_t s_config_token(pl_tokenizer_t *t, const json_t *cfg, const char *key,
                                  char **text_p, int *id_p)
{
    const json_t *v = json_object_get(cfg, key);
    const char *s = NULL;

    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!v || json_is_null(v))
        return PL_OK;
    if (!json_is_string(v) || !(s = json_string_value(v))[0])
        return pl_error(PL_ERR_INVALID, "tokenizer_config.json: %s: not a token string", key);
    if ((*id_p = pl_tokenizer_token_id(t, s)) < 0)
        return pl_error(PL_ERR_INVALID, "tokenizer_config.json: %s '%s' is not a token", key, s);
    if (!(*text_p = strdup(s)))
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    return PL_OK;
}

static pl_status_t s_config(pl_tokenizer_t *t, const json_t *cfg)
{
    const json_t *tmpl = json_object_get(cfg, "chat_template"), *e;
    bool add_bos = false, add_eos = false;
    int eos = -1;
    size_t i;
    pl_status_t st;

    if (!json_is_object(cfg))
        return pl_error(PL_ERR_INVALID, "tokenizer_config.json: not an object");
    if ((st = s_config_token(t, cfg, "bos_token", &t->bos_text, &t->bos_id)) ||
        (st = s_config_token(t, cfg, "eos_token", &t->eos_text, &eos)))
        return st;
    if (eos >= 0)
        t->eos_ids[t->n_eos++] = eos;
    if (json_object_get(cfg, "add_bos_token")) {
        if ((st = pl_json_bool_opt(cfg, "add_bos_token", &add_bos)))
            return pl_error_prefix(st, "tokenizer_config.json: ");
        if (add_bos && t->bos_id < 0)
            return pl_error(PL_ERR_INVALID, "tokenizer_config.json: add_bos_token without a "
                                            "bos_token");
        t->n_prefix = 0;
        if (add_bos)
            t->prefix[t->n_prefix++] = t->bos_id;
    }
    if (json_object_get(cfg, "add_eos_token")) {
        if ((st = pl_json_bool_opt(cfg, "add_eos_token", &add_eos)))
            return pl_error_prefix(st, "tokenizer_config.json: ");
        if (add_eos && eos < 0)
            return pl_error(PL_ERR_INVALID, "tokenizer_config.json: add_eos_token without an "
                                            "eos_token");
        t->n_suffix = 0;
        if (add_eos)
            t->suffix[t->n_suffix++] = eos;
    }
    if (json_is_array(tmpl)) { /* [{name, template}]: the one named "default" */
        json_array_foreach(tmpl, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && strcmp(name, "default") == 0)
                tmpl = json_object_get(e, "template");
        }
    }
    if (tmpl && !json_is_null(tmpl) && !json_is_array(tmpl)) {
        if (!json_is_string(tmpl))
            return pl_error(PL_ERR_INVALID, "tokenizer_config.json: chat_template: not a string");
        if (!(t->chat_template = strdup(json_string_value(tmpl))))
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    }
    return PL_OK;
}

static pl_status_t s_build(pl_tokenizer_t *t, const json_t *root, const json_t *cfg)
{
    size_t n;
    pl_status_t st;

    if (!json_is_object(root))
        return pl_error(PL_ERR_INVALID, "not a JSON object");
    if ((st = s_count_ids(root, &t->n_ids)))
        return st;
    n = (size_t)t->n_ids;
    t->piece_off = malloc(n * sizeof(uint32_t));
    t->piece_len = malloc(n * sizeof(uint32_t));
    t->out_off = calloc(n, sizeof(uint32_t));
    t->out_len = calloc(n, sizeof(uint32_t));
    t->flags = calloc(n, 1);
    if (!t->piece_off || !t->piece_len || !t->out_off || !t->out_len || !t->flags)
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->piece_len, 0xff, n * sizeof(uint32_t));
    if ((st = pl_tok_buf_add(&t->arena, "", 0)) ||
        (st = pl_tok_norm_load(t, json_object_get(root, "normalizer"))) ||
        (st = pl_tok_pre_load(t, json_object_get(root, "pre_tokenizer"))) ||
        (st = s_model(t, root)) ||
        (st = pl_tok_added_load(t, json_object_get(root, "added_tokens"))) ||
        (st = s_post(t, json_object_get(root, "post_processor"))) ||
        (st = pl_tok_decoder_load(t, json_object_get(root, "decoder"))))
        return st;
    t->bos_id = -1;
    if (cfg && (st = s_config(t, cfg)))
        return st;
    return PL_OK;
}

static pl_status_t s_json(const char *text, size_t len, const char *what, size_t flags,
                          json_t **out)
{
    json_error_t err;
    if (!(*out = json_loadb(text, len, flags, &err)))
        return pl_error(PL_ERR_INVALID, "%s: malformed JSON at line %d column %d: %s", what,
                        err.line, err.column, err.text);
    return PL_OK;
}

pl_status_t pl_tokenizer_parse(const char *json, size_t json_len, const char *config,
                               size_t config_len, const char *name, pl_tokenizer_t **tok_p)
{
    pl_tokenizer_t *t = calloc(1, sizeof(*t));
    json_t *root = NULL, *cfg = NULL;
    pl_status_t st;

    if (!t)
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    t->unk_id = t->bos_id = -1;
    if (!(t->name = strdup(name ? name : "tokenizer.json"))) {
        st = pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        goto err;
    }
    /* the config's model_max_length is often 1e30 written as an integer; only its strings and
     * booleans are read, so its numbers may decode as reals */
    if ((st = s_json(json, json_len, "tokenizer.json", 0, &root)) ||
        (config && (st = s_json(config, config_len, "tokenizer_config.json",
                                JSON_DECODE_INT_AS_REAL, &cfg))) ||
        (st = s_build(t, root, cfg))) {
        pl_error_prefix(st, "%s: ", t->name);
        goto err;
    }
    json_decref(root);
    json_decref(cfg);
    *tok_p = t;
    return PL_OK;
err:
    json_decref(root);
    json_decref(cfg);
    pl_tokenizer_destroy(&t);
    return st;
}

pl_status_t pl_tokenizer_load(const char *dir, pl_tokenizer_t **tok_p)
{
    char path[4096], cpath[4096];
    char *json = NULL, *cfg = NULL;
    size_t len = 0, clen = 0;
    pl_status_t st;

    if ((st = pl_path_join(dir, "tokenizer.json", path, sizeof(path))) ||
        (st = pl_path_join(dir, "tokenizer_config.json", cpath, sizeof(cpath))) ||
        (st = pl_file_read(path, PL_TOKENIZER_MAX_FILE_BYTES, &json, &len)))
        return st;
    st = pl_file_read(cpath, PL_TOKENIZER_MAX_FILE_BYTES, &cfg, &clen);
    if (st == PL_ERR_NOT_FOUND)
        st = PL_OK, cfg = NULL;
    if (!st)
        st = pl_tokenizer_parse(json, len, cfg, clen, path, tok_p);
    free(json);
    free(cfg);
    return st;
}

void pl_tokenizer_destroy(pl_tokenizer_t **tok_p)
{
    pl_tokenizer_t *t = *tok_p;
    if (!t)
        return;
    pl_tok_steps_free(t);
    pl_tok_added_free(t);
    pl_tok_strmap_free(&t->vocab);
    pl_tok_mergemap_free(&t->merges);
    pl_tok_buf_free(&t->arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->out_off);
    free(t->out_len);
    free(t->flags);
    free(t->bos_text);
    free(t->eos_text);
    free(t->chat_template);
    free(t->name);
    free(t);
    *tok_p = NULL;
}
