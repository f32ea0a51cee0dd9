/* The benches' models: the presets (a small one where per-token overheads show, one of
 * TinyLlama-1.1B's shape, bench_pipeline's) made with pl-mkmodel in a temporary directory, any
 * weight type. */
#ifndef PL_BENCH_BENCH_MODEL_H
#define PL_BENCH_BENCH_MODEL_H

#include "common/util.h"
#include "model/wtype.h"

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A block-quantized type name: the model is made as a GGUF file (the only format that holds
 * them), at dir/model.gguf. */
static bool s_quant_dtype(const char *dtype)
{
    pl_wtype_t t;
    return pl_wtype_parse(dtype, &t) == PL_OK && pl_wtype_info(t)->quantized;
}

static int s_run_mkmodel(const char *dir, const char *preset, const char *dtype)
{
    char exe[PATH_MAX], bin[PATH_MAX], tool[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    pl_path_dirname(exe, bin, sizeof(bin));
    snprintf(tool, sizeof(tool), "%s/pl-mkmodel", bin);
    /* small: hidden 768, 12 layers, ~110 M parameters, where per-token overheads show;
     * 1b: TinyLlama-1.1B's shape, 1.1 G parameters */
    char *small[] = {"--layers", "12",      "--hidden", "768",        "--intermediate",
                     "2048",     "--heads", "12",       "--kv-heads", "12",
                     "--vocab",  "32000",   NULL};
    char *big[] = {"--layers", "22",      "--hidden", "2048",       "--intermediate",
                   "5632",     "--heads", "32",       "--kv-heads", "4",
                   "--vocab",  "32000",   NULL};
    /* pipeline: bench_pipeline.sh's model (12 layers, hidden 1024), for bench_prefill_chunk */
    char *pipe[] = {"--layers", "12",      "--hidden", "1024",       "--intermediate",
                    "2816",     "--heads", "16",       "--kv-heads", "8",
                    "--vocab",  "8192",    NULL};
    bool is_pipe = strcmp(preset, "pipeline") == 0;
    char **shape = strcmp(preset, "1b") == 0 ? big : is_pipe ? pipe : small;
    char gguf[PATH_MAX + 16];
    snprintf(gguf, sizeof(gguf), "%s/model.gguf", dir);
    bool quant = s_quant_dtype(dtype);
    char *argv[40] = {tool,
                      "--out",
                      quant ? gguf : (char *)dir,
                      "--dtype",
                      quant ? "f32" : (char *)dtype,
                      "--seed",
                      "1",
                      "--max-pos",
                      is_pipe ? "2048" : "4096"};
    int a = 9;
    if (quant) {
        argv[a++] = "--format";
        argv[a++] = "gguf";
        argv[a++] = "--type";
        argv[a++] = (char *)dtype;
    }
    for (int i = 0; shape[i]; i++)
        argv[a++] = shape[i];
    argv[a] = NULL;
    fprintf(stderr, "bench_decode: making the %s model (%s) with %s\n", preset, dtype, tool);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execv(tool, argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return 0;
}

static void s_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX];
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

#endif
