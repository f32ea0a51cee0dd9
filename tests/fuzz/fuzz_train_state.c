/* libFuzzer harness for a checkpoint's trainer_state.json (pipeline/train_ckpt_opt.c). Each
 * input is written to DIR/trainer_state.json and read back. Built by tests/fuzz/CMakeLists.txt
 * (tools/fuzz.sh runs it, clang building the backends the checkpoint's layer table reaches):
 *   tools/fuzz.sh train_state
 */
#include "pipeline/train_ckpt_opt.h"

#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh scratch directory per input, removed before returning: neither a later process with
 * the same pid nor another run at once finds one left behind. */
static int s_one(const char *dir, const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[64] = "/tmp/pl_fuzz_tstate_XXXXXX", path[128];
    if (!mkdtemp(dir))
        abort();
    int rc = s_one(dir, data, size);
    snprintf(path, sizeof(path), "%s/trainer_state.json", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}

static int s_one(const char *dir, const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/trainer_state.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    pl_train_state_t st;
    if (pl_train_ckpt_state_read(dir, &st) == PL_OK) {
        if (st.step < 0 || st.n_stages < 1 || st.n_stages > 99999 || st.data_step < 0)
            abort();
        /* what was read writes back and reads as the same */
        pl_train_state_t again;
        if (pl_train_ckpt_state_write(dir, &st) != PL_OK ||
            pl_train_ckpt_state_read(dir, &again) != PL_OK || again.step != st.step ||
            again.n_stages != st.n_stages || again.data_step != st.data_step ||
            strcmp(again.schedule, st.schedule) != 0)
            abort();
    } else if (!strstr(pl_error_msg(), "trainer_state.json")) {
        abort(); /* every error names the file */
    }
    return 0;
}
