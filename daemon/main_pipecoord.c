/* pipecoord: the cluster coordinator. Reads a cluster file (or the embedded local default). */
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
               "                 [--state-db FILE] [--log-level LEVEL]\n"
               "  --cluster FILE      cluster YAML (default: the embedded local cluster)\n"
               "  --endpoint EP       override coordinator.endpoint, e.g. tcp://0.0.0.0:5555\n"
               "  --http ADDR:PORT    serve /metrics, /livez, /readyz (override coordinator.http)\n"
               "  --state-db FILE     override coordinator.state_db (default: coord.db in the\n"
               "                      state directory, $XDG_STATE_HOME/pipeld or\n"
               "                      ~/.local/state/pipeld)\n"
               "  --log-level LEVEL   error | warn | info | debug (default info)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"cluster", required_argument, NULL, 'c'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         {"http", required_argument, NULL, 'H'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"state-db", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *cluster = NULL, *endpoint = NULL, *http = NULL, *state_db = NULL;
    static char db[PATH_MAX];
    static pl_cfg_cluster_t cfg;
    int o, lvl;
    pl_status_t st;

    pl_log_set_ident("pipecoord");
    while ((o = getopt_long(argc, argv, "c:e:H:l:s:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': cluster = optarg; break;
        case 'e': endpoint = optarg; break;
        case 'H': http = optarg; break;
        case 's': state_db = optarg; break;
        case 'l':
            if ((lvl = pl_log_level_parse(optarg)) < 0) {
                fprintf(stderr, "pipecoord: unknown log level '%s'\n", optarg);
                return 2;
            }
            pl_log_set_level((pl_log_level_t)lvl);
            break;
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
    if (http && pl_cfg_http_parse(http, "--http", &cfg.http)) {
        fprintf(stderr, "pipecoord: %s\n", pl_error_msg());
        return 2;
    }
    if (endpoint)
        snprintf(cfg.endpoint, sizeof(cfg.endpoint), "%s", endpoint);
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
    st = pl_coord_run(&cfg, state_db, &s_stop);
    if (st) {
        pl_log_error("%s", pl_error_msg());
        return 1;
    }
    pl_log_info("stopped");
    return 0;
}
