/* pl-mkmodel's parts, shared by its files (tools/pl-mkmodel.c and tools/mkmodel/): the options,
 * the canonical tensor list with its random values, and the two output formats' writers. */
#ifndef PL_TOOLS_MKMODEL_INT_H
#define PL_TOOLS_MKMODEL_INT_H

#include "common/status.h"
#include "model/model.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PL_MKMODEL_CHUNK 65536 /* elements generated and written at a time */

typedef enum {
    PL_MKMODEL_PROJ,
    PL_MKMODEL_EMBED,
    PL_MKMODEL_NORM,
    PL_MKMODEL_BIAS
} pl_mkmodel_kind_t;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    pl_mkmodel_kind_t kind;
    uint64_t idx; /* position in the canonical order: keys the random stream */
    int shard;
} pl_mkmodel_tensor_t;

typedef struct {
    const char *out;
    int layers, hidden, inter, heads, kv_heads, head_dim, vocab, max_pos, shards;
    pl_dtype_t dtype;
    pl_model_family_t family;
    bool gguf;        /* --format gguf: --out is a .gguf file */
    pl_wtype_t wtype; /* --type: the matrices' type in a GGUF file */
    uint64_t seed;
    bool tie, rope_llama3;
    int n_eos, eos[PL_MODEL_MAX_EOS];
    const char *tokenizer; /* --tokenizer DIR: its files are copied in, vocab and BOS/EOS follow */
    bool eos_given;
    int bos; /* -2: 1 (the default layout), -1: none */
} pl_mkmodel_opts_t;

/* Print "pl-mkmodel: " and the message on stderr; returns 1, the tool's exit status. */
int pl_mkmodel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* opts.c: the command line into *o (defaults already there); 0, or 1 once the error is printed. */
int pl_mkmodel_opts_parse(int argc, char **argv, pl_mkmodel_opts_t *o);

/* family.c: the family's config.json; the canonical tensor list (the caller frees it, NULL when
 * out of memory); a tensor's element count; its f32 values from element `at` on. */
json_t *pl_mkmodel_config_json(const pl_mkmodel_opts_t *o);
pl_mkmodel_tensor_t *pl_mkmodel_tensor_list(const pl_mkmodel_opts_t *o, size_t *n_p);
int64_t pl_mkmodel_tensor_numel(const pl_mkmodel_tensor_t *t);
void pl_mkmodel_tensor_values(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t,
                              int64_t at, size_t k, float *out);

/* safetensors.c, the Hugging Face layout. Each returns 0, or 1 once the error is printed. */
/* One shard's file, its tensors' bytes added to *bytes_p; vals and halves hold
 * PL_MKMODEL_CHUNK elements. */
int pl_mkmodel_shard_write(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, size_t n,
                           int shard, float *vals, uint16_t *halves, uint64_t *bytes_p);
int pl_mkmodel_json_write(const char *dir, const char *name, json_t *j);
/* model.safetensors.index.json of a sharded model. */
int pl_mkmodel_index_write(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, size_t n,
                           uint64_t total);
int pl_mkmodel_stale_index_remove(const char *dir);
int pl_mkmodel_file_copy(const char *from_dir, const char *name, const char *to_dir,
                         bool optional);

/* gguf.c: the one GGUF file at o->out, its tensors' bytes in *bytes_p; 0, or 1 once printed. */
int pl_mkmodel_gguf_write(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, size_t n,
                          uint64_t *bytes_p);

#endif
