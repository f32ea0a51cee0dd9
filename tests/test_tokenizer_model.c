/* A random-weight model around a real tokenizer (pl-mkmodel --tokenizer): the files are copied
 * in, config.json's vocabulary, BOS and EOS follow the tokenizer, and the model opens. */
#include "model/model.h"
#include "model/tokenizer.h"

#include "js_ref.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(tokenizer_model, mkmodel_sizes_the_vocabulary_from_the_tokenizer, .timeout = 120)
{
    char src[4096], out[] = "/tmp/pl_tokmodel_XXXXXX", cmd[8192];
    pl_tokenizer_t *tok = NULL;
    pl_model_t *model = NULL;
    const pl_model_config_t *c;
    const int *eos;

    snprintf(src, sizeof(src), "%s/tokenizer-llama2/models", JS_LENML);
    js_ref_require(src);
    cr_assert_not_null(mkdtemp(out));
    snprintf(cmd, sizeof(cmd), "'%s/pl-mkmodel' --out '%s' --layers 1 --hidden 64 --heads 4 "
             "--kv-heads 2 --intermediate 128 --tokenizer '%s' >/dev/null", PL_BIN_DIR, out, src);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_eq(pl_tokenizer_load(out, &tok), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_model_open(out, &model), PL_OK, "%s", pl_error_msg());
    c = pl_model_config(model);
    cr_assert_eq(c->vocab, pl_tokenizer_vocab_size(tok));
    cr_assert_eq(c->bos_id, pl_tokenizer_bos(tok));
    cr_assert_eq(pl_tokenizer_eos(tok, &eos), 1);
    cr_assert_eq(c->n_eos, 1);
    cr_assert_eq(c->eos_ids[0], eos[0]);
    pl_model_destroy(&model);
    pl_tokenizer_destroy(&tok);

    snprintf(cmd, sizeof(cmd), "'%s/pl-mkmodel' --out '%s' --tokenizer /nonexistent 2>/dev/null",
             PL_BIN_DIR, out);
    cr_assert_neq(system(cmd), 0, "a missing tokenizer must fail");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
    cr_assert_eq(system(cmd), 0);
}

/* pl-tokenize prints what the library encodes, and --decode gives the text back. */
Test(tokenizer_model, pl_tokenize_encodes_and_decodes, .timeout = 120)
{
    char src[4096], cmd[8192], *got = NULL;
    const char *text = "Héllo, wörld 🦙\n";
    char tmp[] = "/tmp/pl_tokcli_XXXXXX", txt[64];
    pl_tokenizer_t *tok = NULL;
    int32_t *ids;
    size_t n, len;
    FILE *f;
    int fd;

    snprintf(src, sizeof(src), "%s/tokenizer-llama3/models", JS_LENML);
    js_ref_require(src);
    cr_assert_eq(pl_tokenizer_load(src, &tok), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_tokenizer_encode(tok, text, strlen(text), PL_TOK_ENCODE_DEFAULT, &ids, &n),
                 PL_OK);
    cr_assert((fd = mkstemp(tmp)) >= 0);
    close(fd);
    snprintf(cmd, sizeof(cmd), "printf 'H\\303\\251llo, w\\303\\266rld \\360\\237\\246\\231\\n' | "
             "'%s/pl-tokenize' '%s' > '%s'", PL_BIN_DIR, src, tmp);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_eq(pl_file_read(tmp, 1 << 20, &got, &len), PL_OK);
    char *p = got;
    for (size_t i = 0; i < n; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        cr_assert(end != p && v == ids[i], "id %zu: pl-tokenize says '%.20s', library %d", i, p,
                  ids[i]);
        p = end;
    }
    cr_assert_str_eq(p, "\n");
    free(got);
    snprintf(txt, sizeof(txt), "%s.txt", tmp);
    snprintf(cmd, sizeof(cmd), "'%s/pl-tokenize' '%s' --decode < '%s' > '%s'", PL_BIN_DIR, src,
             tmp, txt);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_eq(pl_file_read(txt, 1 << 20, &got, &len), PL_OK);
    cr_assert_str_eq(got, text);
    free(got);
    unlink(txt);
    unlink(tmp);
    f = popen("printf '\\377' | '" PL_BIN_DIR "/pl-tokenize' '" JS_LENML
              "/tokenizer-llama3/models' 2>&1", "r");
    cr_assert_not_null(f);
    char msg[512] = "";
    cr_assert_not_null(fgets(msg, sizeof(msg), f));
    cr_assert_neq(pclose(f), 0, "invalid UTF-8 must fail");
    cr_assert_not_null(strstr(msg, "not valid UTF-8 at byte 0"), "%s", msg);
    free(ids);
    pl_tokenizer_destroy(&tok);
}
