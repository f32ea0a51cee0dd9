/* libFuzzer harness for a training job's ids file (pipeline/train_data.c; not part of the CMake
 * build). Build and run from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_train_data.c pipeline/train_data.c model/tokenizer*.c \
 *     common/status.c common/util.c common/log.c common/json.c -ljansson -lpcre2-8 -lutf8proc \
 *     -lpthread -lm \
 *     -o /tmp/fuzz_train_data
 *   mkdir -p /tmp/corpus_tdata && printf '1 2 3\n4\t5\n' > /tmp/corpus_tdata/a
 *   /tmp/fuzz_train_data -max_total_time=60 -max_len=4096 /tmp/corpus_tdata
 */
#include "pipeline/train_data.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the first byte picks the vocabulary (1..256); the rest is the file, copied exactly so a
     * read past its end is an ASan report */
    if (size < 1)
        return 0;
    int vocab = 1 + data[0];
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    pl_train_data_t *d = NULL;
    pl_status_t st = pl_train_data_parse_ids(text, size - 1, "f", vocab, &d);
    if (st == PL_OK) {
        size_t n = pl_train_data_len(d);
        if (n < 1 || n > size)
            abort();
        /* every window of every length is in range and below the vocabulary */
        int32_t tok[8 * 3];
        for (int T = 1; T <= 7 && (size_t)T < n; T++)
            for (int64_t step = 0; step < 3; step++) {
                if (pl_train_data_step(d, T, 3, step * 1000003, tok) != PL_OK)
                    abort();
                for (int i = 0; i < 3 * (T + 1); i++)
                    if (tok[i] < 0 || tok[i] >= vocab)
                        abort();
            }
        pl_train_data_destroy(&d);
    } else if (d || strncmp(pl_error_msg(), "f", 1) != 0) {
        abort(); /* nothing returned on error, and the error names the file */
    }
    free(text);
    return 0;
}
