/* libFuzzer harness for base64 decoding (common/util.c), which reads the UCX worker addresses
 * that come in START: no input may crash it, and what it accepts is canonical, i.e. exactly what
 * encoding the decoded bytes gives back (one spelling per address). Built by
 * tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it). */
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1); /* the decoder takes a C string: up to the first NUL */
    void *raw = NULL;
    size_t len = 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (pl_base64_decode(text, &raw, &len) == PL_OK) {
        char *again = pl_base64_encode(raw, len);
        if (!again || strcmp(again, text) != 0 || len > strlen(text) / 4 * 3)
            abort();
        free(again);
        free(raw);
    }
    free(text);
    return 0;
}
