/* libFuzzer harness for the safetensors header reader: any accepted input must describe tensors
 * that lie wholly inside the buffer. Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_safetensors.c model/safetensors.c model/dtype.c common/status.c common/util.c common/log.c -ljansson -lpthread -lm -o /tmp/fuzz_safetensors && /tmp/fuzz_safetensors -max_total_time=60 CORPUS_DIR */
#include "model/safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_st_header_t hdr;
    float out[256];

    if (pl_st_parse_buffer("fuzz", data, size, &hdr) != PL_OK)
        return 0;
    if (hdr.data_off > size)
        abort();
    for (size_t i = 0; i < hdr.n_entries; i++) {
        const pl_st_entry_t *e = &hdr.entries[i];
        if (e->end < e->begin || e->end > size - hdr.data_off || e->ndim < 0 || e->ndim > 4 ||
            e->numel < 0 || (uint64_t)e->numel * pl_dtype_size(e->dtype) != e->end - e->begin)
            abort();
        /* touch the described bytes so ASan sees any read outside the buffer */
        size_t n = (size_t)e->numel < 256 ? (size_t)e->numel : 256;
        pl_dtype_to_f32(e->dtype, data + hdr.data_off + e->begin, n, out);
        if (e->numel > 0)
            pl_dtype_to_f32(e->dtype, data + hdr.data_off + e->end - pl_dtype_size(e->dtype), 1,
                            out);
    }
    pl_st_header_free(&hdr);
    return 0;
}
