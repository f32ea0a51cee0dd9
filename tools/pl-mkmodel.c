/* pl-mkmodel: write a deterministic random-weight decoder (Llama, Mistral, Qwen2, Qwen3) in the
 * Hugging Face layout (config.json, safetensors shards, index), for tests and benchmarks. */
#include "tools/mkmodel/mkmodel_int.h"
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
    pl_mkmodel_opts_t o = {.layers = 4, .hidden = 256, .inter = 688, .heads = 8,
                           .kv_heads = 4, .vocab = 512, .max_pos = 2048, .shards = 1,
                           .dtype = PL_DT_F32, .seed = 1, .n_eos = 1, .eos = {2}, .bos = -2};
    pl_model_config_t cfg;
    pl_mkmodel_tensor_t *t;
    size_t n;
    uint64_t bytes = 0;
    int64_t params = 0;
    json_t *config;
    char *text;
    float *vals = NULL;
    uint16_t *halves = NULL;
    int rc = 1;

    if (pl_mkmodel_opts_parse(argc, argv, &o))
        return 1;
    config = pl_mkmodel_config_json(&o);
    text = json_dumps(config, JSON_COMPACT);
    /* The reader's own validation is the authority on what a valid model is. */
    if (!text || pl_model_config_parse(text, strlen(text), &cfg) != PL_OK) {
        pl_mkmodel_fail("invalid model shape: %s", pl_error_msg());
        goto err_config;
    }
    if (o.gguf) {
        t = pl_mkmodel_tensor_list(&o, &n);
        if (!t) {
            pl_mkmodel_fail("out of memory");
            goto err_config;
        }
        if (pl_mkmodel_gguf_write(&o, t, n, &bytes) == 0) {
            printf("pl-mkmodel: %s: %d layers, hidden %d, %llu bytes GGUF %s\n", o.out, o.layers,
                   o.hidden, (unsigned long long)bytes, pl_wtype_name(o.wtype));
            rc = 0;
        }
        free(t);
        goto err_config;
    }
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        pl_mkmodel_fail("%s: %s", o.out, strerror(errno));
        goto err_config;
    }
    if (pl_mkmodel_json_write(o.out, "config.json", config))
        goto err_config;
    if (o.tokenizer && (pl_mkmodel_file_copy(o.tokenizer, "tokenizer.json", o.out, false) ||
                        pl_mkmodel_file_copy(o.tokenizer, "tokenizer_config.json", o.out, true)))
        goto err_config;
    t = pl_mkmodel_tensor_list(&o, &n);
    vals = malloc(PL_MKMODEL_CHUNK * sizeof(*vals));
    halves = malloc(PL_MKMODEL_CHUNK * sizeof(*halves));
    if (!t || !vals || !halves) {
        pl_mkmodel_fail("out of memory");
        goto err_buf;
    }
    for (int s = 0; s < o.shards; s++)
        if (pl_mkmodel_shard_write(&o, t, n, s, vals, halves, &bytes))
            goto err_buf;
    if (o.shards > 1 && pl_mkmodel_index_write(&o, t, n, bytes))
        goto err_buf;
    if (o.shards == 1 && pl_mkmodel_stale_index_remove(o.out))
        goto err_buf;
    for (size_t i = 0; i < n; i++)
        params += pl_mkmodel_tensor_numel(&t[i]);
    printf("pl-mkmodel: %s: %s, %d layers, hidden %d, %lld params, %llu bytes %s in %d shard(s)\n",
           o.out, pl_model_family_name(o.family), o.layers, o.hidden, (long long)params,
           (unsigned long long)bytes, pl_dtype_name(o.dtype), o.shards);
    rc = 0;
err_buf:
    free(vals);
    free(halves);
    free(t);
err_config:
    free(text);
    json_decref(config);
    return rc;
}
