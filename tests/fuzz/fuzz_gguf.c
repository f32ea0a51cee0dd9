/* libFuzzer harness for the GGUF reader: any accepted input must describe metadata and tensors
 * that lie wholly inside the buffer; the config and tokenizer views must not read outside it.
 * Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_gguf.c model/gguf.c model/gguf_meta.c model/gguf_vocab.c model/gguf_model.c model/config.c model/wtype.c common/status.c common/util.c common/log.c common/json.c -ljansson -lpthread -lm -o /tmp/fuzz_gguf && /tmp/fuzz_gguf -max_total_time=60 CORPUS_DIR
 * (a seed corpus: build/bin/pl-mkmodel --format gguf --type q8_0 --layers 1 --hidden 64
 * --intermediate 64 --heads 2 --kv-heads 1 --vocab 64 --out CORPUS_DIR/seed.gguf) */
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/gguf_vocab.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_gguf_t *g;
    pl_gguf_vocab_t v;
    pl_model_config_t cfg;
    bool permute;
    float out[256];
    volatile unsigned sum = 0;

    if (pl_gguf_parse("fuzz", data, size, &g) != PL_OK)
        return 0;
    for (size_t i = 0; i < g->n_kvs; i++) {
        const pl_gguf_kv_t *kv = &g->kvs[i];
        if (kv->type == PL_GGUF_STR && (kv->off > size || kv->n > size - kv->off))
            abort();
        for (uint64_t k = 0; kv->type == PL_GGUF_ARR && kv->elem == PL_GGUF_STR && k < kv->n;
             k++) {
            const char *s;
            size_t len;
            pl_gguf_arr_str(g, kv, k, &s, &len);
            if ((const uint8_t *)s < data || len > size - (size_t)((const uint8_t *)s - data))
                abort();
            if (len)
                sum += (unsigned char)s[len - 1];
        }
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        const pl_gguf_tensor_t *t = &g->tensors[i];
        size_t blk = (size_t)pl_wtype_info(t->wtype)->block, bb = pl_wtype_info(t->wtype)->block_bytes;
        if (g->data_off > size || t->off > size - g->data_off ||
            t->nbytes > size - g->data_off - t->off || t->off % g->alignment)
            abort();
        /* decode the first and the last block so ASan sees any read outside the buffer */
        if (t->nbytes >= bb && blk <= 256) {
            const uint8_t *p = pl_gguf_tensor_data(g, t);
            pl_wtype_to_f32(t->wtype, p, blk, out);
            pl_wtype_to_f32(t->wtype, p + t->nbytes - bb, blk, out);
        }
    }
    if (pl_gguf_vocab(g, &v) == PL_OK) {
        for (uint64_t i = 0; i < v.n_tokens; i++)
            sum += (unsigned)pl_gguf_vocab_type(&v, i) + (unsigned)pl_gguf_vocab_score(&v, i);
        for (uint64_t i = 0; i < pl_gguf_vocab_n_merges(&v); i++) {
            const char *a, *b;
            size_t al, bl;
            pl_gguf_vocab_merge(&v, i, &a, &al, &b, &bl);
            if (!al || !bl)
                abort();
            sum += (unsigned char)a[al - 1] + (unsigned char)b[bl - 1];
        }
    }
    (void)pl_gguf_model_config(g, &cfg, &permute);
    (void)sum;
    pl_gguf_free(&g);
    return 0;
}
