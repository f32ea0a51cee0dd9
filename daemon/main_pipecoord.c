/* pipecoord: the cluster coordinator. Reads a cluster file (or the embedded local default). */
#include "backends/cpu/cpu_blas_core.h"
#include "common/config.h"
#include "common/log.h"
#include "common/state_dir.h"
#include "daemon/coord.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: pipecoord [--cluster FILE] [--endpoint ENDPOINT] [--http ADDR:PORT]\n"
               "                 [--state-db FILE] [--log-level LEVEL] [--log-format text|json]\n"
               "                 [--log-target stderr|journald]\n"
               "  --cluster FILE      cluster YAML (default: the embedded local cluster)\n"
               "  --endpoint EP       override coordinator.endpoint, e.g. tcp://0.0.0.0:5555\n"
               "  --node-endpoint EP  override coordinator.node_endpoint, where the daemons talk\n"
               "                      (default: the endpoint's tcp port + 1, or ipc://PATH.nodes)\n"
               "  --http ADDR:PORT    serve /metrics, /livez, /readyz (override coordinator.http)\n"
               "  --state-db FILE     override coordinator.state_db (default: coord.db in the\n"
               "                      state directory, $XDG_STATE_HOME/pipeld or\n"
               "                      ~/.local/state/pipeld)\n"
               "  --log-level LEVEL   error | warn | info | debug (override coordinator.log_level)\n"
               "  --log-format FMT    text | json: one line per event (coordinator.log_format)\n"
               "  --log-target TGT    stderr | journald (coordinator.log_target)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"cluster", required_argument, NULL, 'c'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         {"node-endpoint", required_argument, NULL, 'N'},
                                         {"http", required_argument, NULL, 'H'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"state-db", required_argument, NULL, 's'},
                                         {"log-format", required_argument, NULL, 'F'},
                                         {"log-target", required_argument, NULL, 'T'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *cluster = NULL, *endpoint = NULL, *http = NULL, *level = NULL, *format = NULL,
               *target = NULL, *state_db = NULL, *node_ep = NULL;
    static char db[PATH_MAX];
    static pl_cfg_cluster_t cfg;
    int o;
    pl_status_t st;

    /* first: OpenBLAS on its tuned kernels where it fell back to generic ones (a restart) */
    pl_cpu_blas_core_fix(argv);
    pl_log_set_ident("pipecoord");
    while ((o = getopt_long(argc, argv, "c:e:N:H:l:s:F:T:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': cluster = optarg; break;
        case 'e': endpoint = optarg; break;
        case 'N': node_ep = optarg; break;
        case 'H': http = optarg; break;
        case 's': state_db = optarg; break;
        case 'l': level = optarg; break;
        case 'F': format = optarg; break;
        case 'T': target = optarg; break;
        case 'h': s_usage(stdout); return 0;
        default: s_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        s_usage(stderr);
        return 2;
    }
    st = cluster ? pl_cfg_cluster_load(cluster, &cfg)
                 : pl_cfg_cluster_parse(pl_cfg_default_cluster_yaml,
                                        strlen(pl_cfg_default_cluster_yaml), "<default cluster>",
                                        &cfg);
    if (st) {
        fprintf(stderr, "pipecoord: %s\n", pl_error_msg());
        return 1;
    }
    /* flags over the file, applied together so that a flag can replace a file's bad choice */
    if (pl_log_configure(level ? level : cfg.log_level, format ? format : cfg.log_format,
                         target ? target : cfg.log_target, cluster ? cluster : "command line")) {
        fprintf(stderr, "pipecoord: %s\n", pl_error_msg());
        return 2;
    }
    pl_cpu_blas_core_log();
    if (http && pl_cfg_http_parse(http, "--http", &cfg.http)) {
        fprintf(stderr, "pipecoord: %s\n", pl_error_msg());
        return 2;
    }
    if (endpoint) { /* its node endpoint is derived from it unless given too */
        snprintf(cfg.endpoint, sizeof(cfg.endpoint), "%s", endpoint);
        cfg.node_endpoint[0] = '\0';
    }
    if (node_ep)
        snprintf(cfg.node_endpoint, sizeof(cfg.node_endpoint), "%s", node_ep);
    if (!state_db)
        state_db = cfg.state_db;
    if (!state_db[0]) {
        if (pl_state_path("coord.db", db, sizeof(db))) {
            fprintf(stderr, "pipecoord: %s (set coordinator.state_db or --state-db)\n",
                    pl_error_msg());
            return 1;
        }
        state_db = db;
    }
    signal(SIGINT, s_on_signal);
    signal(SIGTERM, s_on_signal);
    signal(SIGPIPE, SIG_IGN);
    st = pl_coord_run(&cfg, state_db, cluster == NULL, &s_stop);
    if (st) {
        pl_log_error("%s", pl_error_msg());
        return 1;
    }
    pl_log_info("stopped");
    return 0;
}
