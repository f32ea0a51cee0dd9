/* pl-generate: run a job file in this one process (no daemons, no network), optionally split
 * into stages run back to back. The reference the pipeline is compared with. */
#include "backends/backend.h"
#include "common/config.h"
#include "common/util.h"
#include "pipeline/gen.h"
#include "pipeline/gen_local.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_die(const char *what)
{
    fprintf(stderr, "pl-generate: %s\n", what);
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"split", required_argument, NULL, 's'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"microbatches", required_argument, NULL, 'm'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static pl_cfg_job_t job;
    int counts[64], n_counts = 0, threads = 0, mb = -1, o;
    char *text = NULL;
    size_t len;
    json_t *prompts, *results = NULL;
    void *dev = NULL;
    pl_gen_local_stats_t stats;

    while ((o = getopt_long(argc, argv, "s:t:m:h", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            for (char *save, *t = strtok_r(optarg, ",", &save); t; t = strtok_r(NULL, ",", &save))
                if (n_counts < 64 && atoi(t) > 0)
                    counts[n_counts++] = atoi(t);
                else
                    return s_die("--split takes positive layer counts, e.g. 3,5");
            break;
        case 't': threads = atoi(optarg); break;
        case 'm': mb = atoi(optarg); break;
        case 'h':
            printf("usage: pl-generate [--split N,N,...] [--threads N] [--microbatches M] "
                   "JOB.yaml\n");
            return 0;
        default: return 2;
        }
    }
    if (optind + 1 != argc)
        return s_die("usage: pl-generate [--split N,N,...] [--threads N] JOB.yaml");
    if (pl_cfg_job_load(argv[optind], &job) ||
        pl_file_read(job.prompts, 64u << 20, &text, &len) ||
        pl_gen_prompts_parse(text, len, job.prompts, &prompts)) {
        free(text);
        return s_die(pl_error_msg());
    }
    free(text);
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)job.seed);
    int stages = n_counts ? n_counts : 1;
    int want_mb = mb >= 0 ? mb : job.microbatches;
    json_t *gen = json_pack("{s:o, s:i, s:b, s:i, s:i, s:s, s:{s:f, s:i, s:f, s:s}}",
                            "prompts", prompts, "max_new_tokens", job.max_new_tokens,
                            "stop_at_eos", job.stop_at_eos, "microbatches", PL_MAX(want_mb, stages),
                            "prefill_chunk", job.prefill_chunk, "wire_dtype", job.wire_dtype,
                            "sampling", "temperature",
                            (double)job.temperature, "top_k", job.top_k, "top_p",
                            (double)job.top_p, "seed", seed);
    const pl_be_ops_t *ops = pl_be_cpu_ops();
    if (ops->open(0, threads, &dev)) {
        json_decref(gen);
        return s_die(pl_error_msg());
    }
    pl_status_t st = pl_gen_local_run(job.model, gen, ops, dev, n_counts ? counts : NULL,
                                      stages, &results, &stats);
    json_decref(gen);
    if (!st) {
        size_t i;
        json_t *r;
        json_array_foreach(results, i, r)
        {
            char *line = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
            puts(line);
            free(line);
        }
        double decode_s = stats.total_s - stats.prefill_s;
        fprintf(stderr,
                "pl-generate: %llu prompt tokens, %llu generated in %.3f s | prefill %.1f tok/s "
                "| decode %.1f tok/s\n",
                (unsigned long long)stats.prompt_tokens, (unsigned long long)stats.generated,
                stats.total_s, stats.prefill_s > 0 ? stats.prompt_tokens / stats.prefill_s : 0,
                decode_s > 0 ? (stats.generated - json_array_size(results)) / decode_s : 0);
        json_decref(results);
    }
    ops->close(dev);
    return st ? s_die(pl_error_msg()) : 0;
}
