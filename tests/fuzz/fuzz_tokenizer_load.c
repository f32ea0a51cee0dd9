/* libFuzzer harness for the tokenizer.json loader: input is tokenizer.json, optionally followed by
 * a NUL and tokenizer_config.json; an accepted file must encode and decode within its vocabulary.
 * Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_tokenizer_load.c model/tokenizer*.c common/json.c common/status.c common/util.c common/log.c -ljansson -lpcre2-8 -lutf8proc -lpthread -lm -o /tmp/fuzz_tokenizer_load && /tmp/fuzz_tokenizer_load -max_total_time=60 CORPUS_DIR */
#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *texts[] = {"Hello world, café 日本 🦙 <s></s>\n\t  x", "", "  ", "abcabc"};
    const char *json = (const char *)data, *cfg = NULL;
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = size, cfg_len = 0;
    pl_tokenizer_t *tok = NULL;

    if (nul) {
        json_len = (size_t)(nul - data);
        cfg = (const char *)nul + 1;
        cfg_len = size - json_len - 1;
    }
    if (pl_tokenizer_parse(json, json_len, cfg, cfg_len, "fuzz", &tok) != PL_OK)
        return 0;
    int n_ids = pl_tokenizer_vocab_size(tok);
    if (n_ids < 1 || n_ids > PL_TOKENIZER_MAX_VOCAB || pl_tokenizer_bos(tok) >= n_ids)
        abort();
    for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
        int32_t *ids;
        size_t n, len;
        char *text;
        if (pl_tokenizer_encode(tok, texts[t], strlen(texts[t]), PL_TOK_ENCODE_DEFAULT, &ids, &n))
            continue;
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= n_ids)
                abort();
        if (pl_tokenizer_decode(tok, ids, n, 0, &text, &len) == PL_OK) {
            if (strlen(text) != len)
                abort();
            free(text);
        }
        free(ids);
    }
    pl_tokenizer_destroy(&tok);
    return 0;
}
