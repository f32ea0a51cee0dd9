/* pipeld: the node daemon. Settings from a node file, flags, or a node entry of a cluster file. */
#include "backends/cpu/cpu_blas_core.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/node.h"
#include "transport/ucx.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: pipeld [--config NODE.yaml] [--name NAME] [--coordinator ENDPOINT]\n"
            "              [--threads N] [--devices cpu,cuda,hip] [--http ADDR:PORT]\n"
            "              [--log-level LEVEL] [--log-format text|json]\n"
            "              [--log-target stderr|journald]\n"
            "  --config FILE        node YAML (etc/pipeld.yaml); flags override its values\n"
            "  --cluster FILE       take the coordinator and this node's threads from a cluster\n"
            "                       file (with --name; the embedded default when FILE is '-')\n"
            "  --name NAME          node name (default: the host name)\n"
            "  --coordinator EP     coordinator endpoint (default tcp://127.0.0.1:5555)\n"
            "  --node-endpoint EP   the coordinator's node endpoint (default: derived from the\n"
            "                       coordinator endpoint, tcp port + 1 or ipc://PATH.nodes)\n"
            "  --threads N          CPU threads for the CPU device (0: all cores)\n"
            "  --devices LIST       backends to use (default: every one found)\n"
            "  --http ADDR:PORT     serve /metrics, /livez, /readyz (override the node file's http)\n"
            "  --log-level LEVEL    error | warn | info | debug (override the node file's log_level)\n"
            "  --log-format FMT     text | json: one line per event (override log_format)\n"
            "  --log-target TGT     stderr | journald (override log_target)\n"
            "A coordinator with CURVE keys needs its public key: coordinator_public_key in the\n"
            "node file, the cluster file's security section, or $PIPELD_COORDINATOR_KEY.\n");
}

static int s_devices(pl_cfg_node_t *cfg, const char *list)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", list);
    cfg->n_devices = 0;
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (cfg->n_devices == 4 ||
            (strcmp(t, "cpu") && strcmp(t, "cuda") && strcmp(t, "hip"))) {
            fprintf(stderr, "pipeld: --devices: '%s' is not cpu, cuda or hip\n", t);
            return -1;
        }
        snprintf(cfg->devices[cfg->n_devices++], sizeof(cfg->devices[0]), "%s", t);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'f'},
                                         {"cluster", required_argument, NULL, 'C'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"coordinator", required_argument, NULL, 'c'},
                                         {"node-endpoint", required_argument, NULL, 'N'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"devices", required_argument, NULL, 'd'},
                                         {"http", required_argument, NULL, 'H'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"log-format", required_argument, NULL, 'F'},
                                         {"log-target", required_argument, NULL, 'T'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    static pl_cfg_node_t cfg;
    static pl_cfg_cluster_t cluster;
    const char *config = NULL, *cluster_file = NULL, *name = NULL, *coord = NULL, *devices = NULL,
               *node_ep = NULL, *level = NULL, *http = NULL, *log_format = NULL, *log_target = NULL;
    int threads = -1, o;

    /* first: OpenBLAS on its tuned kernels where it fell back to generic ones (a restart) */
    pl_cpu_blas_core_fix(argv);
    while ((o = getopt_long(argc, argv, "f:C:n:c:N:t:d:H:l:F:T:h", opts, NULL)) != -1) {
        switch (o) {
        case 'f': config = optarg; break;
        case 'C': cluster_file = optarg; break;
        case 'n': name = optarg; break;
        case 'c': coord = optarg; break;
        case 'N': node_ep = optarg; break;
        case 't': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 0 || v > 4096) {
                fprintf(stderr, "pipeld: --threads: '%s' is not a count\n", optarg);
                return 2;
            }
            threads = (int)v;
            break;
        }
        case 'd': devices = optarg; break;
        case 'H': http = optarg; break;
        case 'l': level = optarg; break;
        case 'F': log_format = optarg; break;
        case 'T': log_target = optarg; break;
        case 'h': s_usage(stdout); return 0;
        default: s_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        s_usage(stderr);
        return 2;
    }
    if (config) {
        if (pl_cfg_node_load(config, &cfg)) {
            fprintf(stderr, "pipeld: %s\n", pl_error_msg());
            return 1;
        }
    } else {
        char host[64] = "node";
        gethostname(host, sizeof(host) - 1);
        snprintf(cfg.name, sizeof(cfg.name), "%s", host);
        snprintf(cfg.coordinator, sizeof(cfg.coordinator), "tcp://127.0.0.1:5555");
        cfg.memory_reserve_mb = 512;
        cfg.heartbeat_ms = 500;
        snprintf(cfg.log_level, sizeof(cfg.log_level), "info");
        snprintf(cfg.log_format, sizeof(cfg.log_format), "text");
        snprintf(cfg.log_target, sizeof(cfg.log_target), "stderr");
    }
    if (name)
        snprintf(cfg.name, sizeof(cfg.name), "%s", name);
    if (cluster_file) {
        pl_status_t st = strcmp(cluster_file, "-") == 0
                             ? pl_cfg_cluster_parse(pl_cfg_default_cluster_yaml,
                                                    strlen(pl_cfg_default_cluster_yaml),
                                                    "<default cluster>", &cluster)
                             : pl_cfg_cluster_load(cluster_file, &cluster);
        if (st) {
            fprintf(stderr, "pipeld: %s\n", pl_error_msg());
            return 1;
        }
        snprintf(cfg.coordinator, sizeof(cfg.coordinator), "%s", cluster.endpoint);
        snprintf(cfg.coordinator_node, sizeof(cfg.coordinator_node), "%s", cluster.node_endpoint);
        snprintf(cfg.coordinator_key, sizeof(cfg.coordinator_key), "%s", cluster.public_key);
        cfg.heartbeat_ms = cluster.heartbeat_ms;
        for (int i = 0; i < cluster.n_nodes; i++)
            if (strcmp(cluster.nodes[i].name, cfg.name) == 0)
                cfg.threads = cluster.nodes[i].threads;
    }
    if (coord) { /* another coordinator: its node endpoint is derived unless given too */
        snprintf(cfg.coordinator, sizeof(cfg.coordinator), "%s", coord);
        cfg.coordinator_node[0] = '\0';
    }
    if (node_ep)
        snprintf(cfg.coordinator_node, sizeof(cfg.coordinator_node), "%s", node_ep);
    const char *key = getenv("PIPELD_COORDINATOR_KEY"); /* CURVE: the coordinator's public key */
    if (key && *key)
        snprintf(cfg.coordinator_key, sizeof(cfg.coordinator_key), "%s", key);
    const char *key_file = getenv("PIPELD_KEY_FILE"); /* CURVE: this node's secret key file */
    if (key_file && *key_file)
        snprintf(cfg.key_file, sizeof(cfg.key_file), "%s", key_file);
    if (threads >= 0)
        cfg.threads = threads;
    if (devices && s_devices(&cfg, devices))
        return 2;
    if (http && pl_cfg_http_parse(http, "--http", &cfg.http)) {
        fprintf(stderr, "pipeld: %s\n", pl_error_msg());
        return 2;
    }
    /* flags over the file, applied together so that a flag can replace a file's bad choice */
    if (pl_log_configure(level ? level : cfg.log_level, log_format ? log_format : cfg.log_format,
                         log_target ? log_target : cfg.log_target,
                         config ? config : "command line")) {
        fprintf(stderr, "pipeld: %s\n", pl_error_msg());
        return 2;
    }
    pl_log_set_ident("pipeld");
    pl_log_set_node(cfg.name);
    pl_cpu_blas_core_log();
    signal(SIGINT, s_on_signal);
    signal(SIGTERM, s_on_signal);
    signal(SIGPIPE, SIG_IGN);
    if (pl_node_run(&cfg, &s_stop)) {
        pl_log_error("%s", pl_error_msg());
        return 1;
    }
    pl_log_info("stopped");
    return 0;
}
