/* pl-generate: run a job file in this one process (no daemons, no network), optionally split
 * into stages run back to back. The reference the pipeline is compared with. */
#include "common/config.h"
#include "common/log.h"
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
    static pl_job_spec_t spec;
    json_t *results = NULL;
    pl_gen_local_stats_t stats;

    /* first: OpenBLAS on its tuned kernels where it fell back to generic ones (a restart), as
     * the daemons it is compared with run (cpu_blas_core.h, through gen_local.h's backend) */
    pl_cpu_blas_core_fix(argv);
    pl_log_set_ident("pl-generate");
    pl_cpu_blas_core_log();
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
    if (pl_cfg_job_load(argv[optind], &job) || pl_gen_spec_from_file(&job, &spec))
        return s_die(pl_error_msg());
    int stages = n_counts ? n_counts : 1;
    int want_mb = mb >= 0 ? mb : job.microbatches;
    spec.microbatches = PL_MAX(want_mb, stages);
    pl_status_t st = pl_gen_local_run_on(spec.model, &spec, "cpu", threads,
                                         n_counts ? counts : NULL, stages, &results, &stats);
    pl_job_spec_clear(&spec);
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
    return st ? s_die(pl_error_msg()) : 0;
}
