/* pl-mkmodel's command line: every option checked and the model's shape made consistent, with
 * --tokenizer's vocabulary, BOS and EOS read from the tokenizer itself. */
#include "tools/mkmodel/mkmodel_int.h"
#include "common/util.h"
#include "model/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_mkmodel_fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pl-mkmodel: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static bool s_parse_int(const char *s, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return false;
    *out = (int)v;
    return true;
}

static bool s_parse_eos(const char *s, pl_mkmodel_opts_t *o)
{
    char buf[256], *save, *tok;
    if (strlen(s) >= sizeof(buf))
        return false;
    strcpy(buf, s);
    o->n_eos = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_eos == PL_MODEL_MAX_EOS || !s_parse_int(tok, 0, 1 << 22, &o->eos[o->n_eos]))
            return false;
        o->n_eos++;
    }
    return o->n_eos > 0;
}

/* --tokenizer: the tokenizer must load; it sizes the vocabulary and names BOS and EOS. */
static int s_tokenizer_opts(pl_mkmodel_opts_t *o)
{
    pl_tokenizer_t *tok = NULL;
    const int *eos;
    int n_eos;

    if (pl_tokenizer_load(o->tokenizer, &tok))
        return pl_mkmodel_fail("--tokenizer: %s", pl_error_msg());
    o->vocab = pl_tokenizer_vocab_size(tok);
    o->bos = pl_tokenizer_bos(tok);
    n_eos = pl_tokenizer_eos(tok, &eos);
    if (!o->eos_given && n_eos > 0) {
        o->n_eos = PL_MIN(n_eos, PL_MODEL_MAX_EOS);
        memcpy(o->eos, eos, (size_t)o->n_eos * sizeof(int));
    }
    pl_tokenizer_destroy(&tok);
    return 0;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: pl-mkmodel --out DIR [--layers 4] [--hidden 256] [--intermediate 688]\n"
               "       [--heads 8] [--kv-heads 4] [--head-dim N] [--vocab 512]\n"
               "       [--dtype f32|f16|bf16] [--family llama|mistral|qwen2|qwen3]\n"
               "       [--seed 1] [--shards 1] [--tie] [--rope-llama3]\n"
               "       [--max-pos 2048] [--eos 2[,ID...]] [--tokenizer DIR]\n"
               "       [--format safetensors|gguf] [--type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k]\n"
               "  --tokenizer DIR: copy DIR's tokenizer.json and tokenizer_config.json in; the\n"
               "       vocabulary size, BOS and EOS come from them\n"
               "  --format gguf writes one GGUF file at --out, its matrices in --type (f32)\n");
}

int pl_mkmodel_opts_parse(int argc, char **argv, pl_mkmodel_opts_t *o)
{
    static const struct option s_long[] = {
        {"out", required_argument, 0, 'o'},    {"layers", required_argument, 0, 'l'},
        {"hidden", required_argument, 0, 'H'}, {"intermediate", required_argument, 0, 'i'},
        {"heads", required_argument, 0, 'a'},  {"kv-heads", required_argument, 0, 'k'},
        {"head-dim", required_argument, 0, 'd'}, {"vocab", required_argument, 0, 'v'},
        {"dtype", required_argument, 0, 't'},  {"seed", required_argument, 0, 's'},
        {"shards", required_argument, 0, 'n'}, {"tie", no_argument, 0, 'T'},
        {"rope-llama3", no_argument, 0, 'r'},  {"max-pos", required_argument, 0, 'm'},
        {"eos", required_argument, 0, 'e'},    {"help", no_argument, 0, 'h'},
        {"family", required_argument, 0, 'f'},
        {"format", required_argument, 0, 'F'}, {"type", required_argument, 0, 'W'},
        {"tokenizer", required_argument, 0, 'z'}, {0, 0, 0, 0}};
    int c, li = 0, *target;
    char *end;

    opterr = 0; /* one line of our own instead of getopt's message plus usage */
    while ((c = getopt_long(argc, argv, "", s_long, &li)) != -1) {
        target = NULL;
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'l': target = &o->layers; break;
        case 'H': target = &o->hidden; break;
        case 'i': target = &o->inter; break;
        case 'a': target = &o->heads; break;
        case 'k': target = &o->kv_heads; break;
        case 'd': target = &o->head_dim; break;
        case 'v': target = &o->vocab; break;
        case 'n': target = &o->shards; break;
        case 'm': target = &o->max_pos; break;
        case 'T': o->tie = true; break;
        case 'r': o->rope_llama3 = true; break;
        case 'h': s_usage(stdout); exit(0);
        case 't':
            if (strcmp(optarg, "f32") == 0)
                o->dtype = PL_DT_F32;
            else if (strcmp(optarg, "f16") == 0)
                o->dtype = PL_DT_F16;
            else if (strcmp(optarg, "bf16") == 0)
                o->dtype = PL_DT_BF16;
            else
                return pl_mkmodel_fail("--dtype: '%s' is not f32, f16 or bf16", optarg);
            break;
        case 'f': {
            int f = 0;
            while (f < PL_FAMILY_COUNT && strcmp(optarg, pl_model_family_name(f)) != 0)
                f++;
            if (f == PL_FAMILY_COUNT)
                return pl_mkmodel_fail("--family: '%s' is not llama, mistral, qwen2 or qwen3",
                                       optarg);
            o->family = (pl_model_family_t)f;
            break;
        }
        case 'F':
            if (strcmp(optarg, "gguf") != 0 && strcmp(optarg, "safetensors") != 0)
                return pl_mkmodel_fail("--format: '%s' is not safetensors or gguf", optarg);
            o->gguf = strcmp(optarg, "gguf") == 0;
            break;
        case 'W':
            if (pl_wtype_parse(optarg, &o->wtype))
                return pl_mkmodel_fail("--type: %s", pl_error_msg());
            break;
        case 's':
            errno = 0;
            o->seed = strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end || optarg[0] == '-')
                return pl_mkmodel_fail("--seed: '%s' is not a non-negative integer", optarg);
            break;
        case 'z': o->tokenizer = optarg; break;
        case 'e':
            o->eos_given = true;
            if (!s_parse_eos(optarg, o))
                return pl_mkmodel_fail("--eos: '%s' is not a comma-separated list of up to %d ids",
                                       optarg, PL_MODEL_MAX_EOS);
            break;
        default: return pl_mkmodel_fail("bad option '%s' (see --help)", argv[optind - 1]);
        }
        if (target && !s_parse_int(optarg, 1, 1 << 24, target))
            return pl_mkmodel_fail("--%s: '%s' is not an integer in [1, %d]", s_long[li].name,
                                   optarg, 1 << 24);
    }
    if (optind < argc)
        return pl_mkmodel_fail("unexpected argument '%s'", argv[optind]);
    if (!o->out)
        return pl_mkmodel_fail("--out DIR is required");
    if (o->head_dim == 0) {
        if (o->hidden % o->heads != 0)
            return pl_mkmodel_fail("--hidden %d is not a multiple of --heads %d; give --head-dim",
                                   o->hidden, o->heads);
        o->head_dim = o->hidden / o->heads;
    }
    if (o->shards > o->layers)
        return pl_mkmodel_fail("--shards %d is more than --layers %d", o->shards, o->layers);
    if (o->gguf && o->tokenizer)
        return pl_mkmodel_fail(
            "--tokenizer writes tokenizer.json beside safetensors; a GGUF file's "
            "vocabulary (tokenizer.ggml.*) is not written yet");
    if (o->tokenizer && s_tokenizer_opts(o))
        return 1;
    if (o->gguf && (o->shards != 1 || o->rope_llama3 || o->n_eos != 1))
        return pl_mkmodel_fail(
            "--format gguf writes one file with one eos id and no llama3 rope scaling "
            "(--shards, --rope-llama3 and a list of --eos are for safetensors)");
    if (o->gguf) {
        int blk = pl_wtype_info(o->wtype)->block;
        if (o->hidden % blk || o->inter % blk || ((int64_t)o->heads * o->head_dim) % blk)
            return pl_mkmodel_fail(
                "--type %s: --hidden, --intermediate and heads * head_dim must be "
                "multiples of %d",
                pl_wtype_name(o->wtype), blk);
    }
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos[i] >= o->vocab)
            return pl_mkmodel_fail("--eos %d is not below --vocab %d", o->eos[i], o->vocab);
    return 0;
}
