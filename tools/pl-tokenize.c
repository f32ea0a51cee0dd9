/* pl-tokenize: the model directory's own tokenizer on standard input, for scripts and for
 * checking against other tokenizers: text -> ids (one line, space-separated), or --decode. */
#include "common/util.h"
#include "model/tokenizer.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_INPUT (256u << 20)

static int s_die(const char *what)
{
    fprintf(stderr, "pl-tokenize: %s\n", what);
    return 1;
}

static char *s_read_all(FILE *f, size_t *len_p)
{
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap + 1), *nb;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            if (cap >= S_MAX_INPUT || !(nb = realloc(buf, 2 * cap + 1))) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf)
        buf[len] = '\0';
    *len_p = len;
    return buf;
}

/* ids separated by spaces, commas, newlines, optionally inside [ ]. */
static int s_decode(pl_tokenizer_t *tok, char *in, unsigned flags)
{
    int32_t *ids = NULL;
    size_t n = 0, cap = 0, len;
    char *text, *end;

    for (char *p = in; *p;) {
        if (strchr(" \t\r\n,[]", *p)) {
            p++;
            continue;
        }
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            free(ids);
            fprintf(stderr, "pl-tokenize: input: '%.20s' is not a token id\n", p);
            return 1;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            int32_t *ni = realloc(ids, cap * sizeof(*ni));
            if (!ni) {
                free(ids);
                return s_die("out of memory");
            }
            ids = ni;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (pl_tokenizer_decode(tok, ids, n, flags, &text, &len)) {
        free(ids);
        return s_die(pl_error_msg());
    }
    fwrite(text, 1, len, stdout);
    free(text);
    free(ids);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"decode", no_argument, NULL, 'd'},
                                         {"no-special", no_argument, NULL, 'n'},
                                         {"special-as-text", no_argument, NULL, 't'},
                                         {"skip-special", no_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static const char usage[] =
        "usage: pl-tokenize MODEL_DIR [--decode [--skip-special]] [--no-special] "
        "[--special-as-text] < input\n"
        "  encode: UTF-8 text in, token ids out (one line, space-separated)\n"
        "  --decode: token ids in, text out\n"
        "  --no-special: no BOS/EOS added; --special-as-text: '<s>' in the text is text\n";
    unsigned enc = PL_TOK_ENCODE_DEFAULT, dec = 0;
    bool decode = false;
    pl_tokenizer_t *tok = NULL;
    char *in;
    size_t len;
    int o, rc = 0;

    while ((o = getopt_long(argc, argv, "dntsh", opts, NULL)) != -1) {
        switch (o) {
        case 'd': decode = true; break;
        case 'n': enc &= ~(unsigned)PL_TOK_ADD_SPECIAL; break;
        case 't': enc &= ~(unsigned)PL_TOK_PARSE_SPECIAL; break;
        case 's': dec |= PL_TOK_SKIP_SPECIAL; break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        fputs(usage, stderr);
        return 2;
    }
    if (pl_tokenizer_load(argv[optind], &tok))
        return s_die(pl_error_msg());
    if (!(in = s_read_all(stdin, &len))) {
        pl_tokenizer_destroy(&tok);
        return s_die("standard input: unreadable or larger than 256 MiB");
    }
    if (decode) {
        rc = s_decode(tok, in, dec);
    } else {
        int32_t *ids;
        size_t n;
        if (pl_tokenizer_encode(tok, in, len, enc, &ids, &n)) {
            rc = s_die(pl_error_msg());
        } else {
            for (size_t i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
            free(ids);
        }
    }
    free(in);
    pl_tokenizer_destroy(&tok);
    return rc;
}
