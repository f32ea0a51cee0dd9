/* libFuzzer harness for the code-object lister of test_gpu_objects (ELF section lookup and the
 * .nv_fatbin walk): no input may crash it, and every image it reports lies inside the input.
 * Built by tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it); by hand:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. \
 *       tests/fuzz/fuzz_gpu_objects.c common/status.c -o /tmp/fuzz_gpu_objects
 *   /tmp/fuzz_gpu_objects -max_total_time=60 -max_len=16384 /tmp/fuzz_gpu_objects_corpus
 * A seed corpus: an object from nvcc (-c) and a fatbin from fatbinary --create, as
 * test_gpu_objects makes them. */
#include "tests/gpu_objects.h"

#include <stdlib.h>

#define MAX_IMAGES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    go_image_t im[MAX_IMAGES];
    int n = -1;
    size_t off = 0, len = 0;
    /* the bytes as a whole host binary, and as a bare fat binary */
    if (go_elf_section(data, size, ".nv_fatbin", &off, &len) == PL_OK) {
        if (off > size || len > size - off)
            abort();
        (void)go_fatbin_list(data + off, len, im, MAX_IMAGES, &n);
    }
    if (go_fatbin_list(data, size, im, MAX_IMAGES, &n) == PL_OK) {
        if (n < 0)
            abort();
        /* each image has at least a 64-byte header inside the input */
        if ((size_t)(n < MAX_IMAGES ? n : MAX_IMAGES) * GO_ENTRY_MIN > size)
            abort();
        for (int i = 0; i < n && i < MAX_IMAGES; i++)
            if (im[i].fatbin < 0 || im[i].elf_sm < -1 || im[i].elf_sm > 255)
                abort();
    }
    return 0;
}
