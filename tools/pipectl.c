/* pipectl: submit and watch jobs, plan them (on the live cluster or a described one), list
 * nodes, ask a node's health. This file reads the options and runs the verb (tools/pipectl/). */
#include "tools/pipectl/pipectl.h"
#include "transport/keys.h"
#include "transport/sock.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which PL_PIPECTL_OPT_* an option letter is (0: every verb takes it). */
static unsigned s_opt_bit(int o)
{
    switch (o) {
    case 'w': return PL_PIPECTL_OPT_WAIT;
    case 's': return PL_PIPECTL_OPT_STAGES;
    case 'C': return PL_PIPECTL_OPT_CLUSTER;
    case PL_PIPECTL_GEN_MAX_TOKENS:
    case PL_PIPECTL_GEN_TEMPERATURE:
    case PL_PIPECTL_GEN_CHAT:
    case PL_PIPECTL_GEN_STOP: return PL_PIPECTL_OPT_GEN;
    default: return 0;
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"coordinator", required_argument, NULL, 'c'},
                                         {"coordinator-key", required_argument, NULL, 'k'},
                                         {"key", required_argument, NULL, 'K'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"timeout", required_argument, NULL, 'T'},
                                         {"wait", no_argument, NULL, 'w'},
                                         {"stages", required_argument, NULL, 's'},
                                         {"cluster", required_argument, NULL, 'C'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"max-tokens", required_argument, NULL,
                                          PL_PIPECTL_GEN_MAX_TOKENS},
                                         {"temperature", required_argument, NULL,
                                          PL_PIPECTL_GEN_TEMPERATURE},
                                         {"chat", no_argument, NULL, PL_PIPECTL_GEN_CHAT},
                                         {"stop", required_argument, NULL, PL_PIPECTL_GEN_STOP},
                                         {NULL, 0, NULL, 0}};
    pl_pipectl_t c = {.endpoint = getenv("PIPELD_COORDINATOR"), .timeout_s = 10, .stages = -1};
    const char *key = getenv("PIPELD_COORDINATOR_KEY"); /* CURVE: the coordinator's public key */
    const char *key_file = getenv("PIPELD_KEY_FILE");   /* CURVE: this client's secret key */
    unsigned given = 0; /* PL_PIPECTL_OPT_* seen */
    bool help = false;
    int o, rc;

    if (!c.endpoint || !*c.endpoint)
        c.endpoint = "tcp://127.0.0.1:5555";
    /* GNU getopt moves the command words after the options, wherever the user put them */
    while ((o = getopt_long(argc, argv, "c:k:K:o:T:ws:C:h", opts, NULL)) != -1) {
        given |= s_opt_bit(o);
        switch (o) {
        case 'c': c.endpoint = optarg; break;
        case 'k': key = optarg; break;
        case 'K': key_file = optarg; break;
        case 'o':
            if (strcmp(optarg, "json") && strcmp(optarg, "table"))
                return pl_pipectl_die("-o takes table or json, not '%s'", optarg);
            c.json = !strcmp(optarg, "json");
            break;
        case 'T': c.timeout_s = atof(optarg) > 0 ? atof(optarg) : 10; break;
        case 'w': c.wait = true; break;
        case 's': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 64)
                return pl_pipectl_die("--stages: '%s' is not a count in [0, 64]", optarg);
            c.stages = (int)v;
            break;
        }
        case 'C': c.cluster = optarg; break;
        case 'h': help = true; break;
        case PL_PIPECTL_GEN_MAX_TOKENS:
        case PL_PIPECTL_GEN_TEMPERATURE:
        case PL_PIPECTL_GEN_CHAT:
        case PL_PIPECTL_GEN_STOP:
            if (pl_pipectl_gen_opt(&c.gen, o, optarg))
                return 1;
            break;
        default: pl_pipectl_usage(stderr); return 2;
        }
    }
    const pl_pipectl_verb_t *v = optind < argc ? pl_pipectl_verb_find(argv[optind]) : NULL;
    if (help) {
        if (v)
            pl_pipectl_verb_usage(stdout, v);
        else
            pl_pipectl_usage(stdout);
        return 0;
    }
    if (optind >= argc) {
        pl_pipectl_usage(stderr);
        return 2;
    }
    int n_args = argc - optind - 1;
    if (!v || n_args < v->min_args || n_args > v->max_args) {
        fprintf(stderr, "pipectl: unknown command or wrong arguments: %s\n", argv[optind]);
        if (v)
            pl_pipectl_verb_usage(stderr, v);
        else
            pl_pipectl_usage(stderr);
        return 2;
    }
    if (given & ~v->opts) {
        if (given & ~v->opts & PL_PIPECTL_OPT_GEN)
            return pl_pipectl_die("--max-tokens, --temperature, --chat and --stop are generate's "
                                  "options, not %s's",
                                  v->name);
        fprintf(stderr, "pipectl: %s does not take that option\n", v->name);
        pl_pipectl_verb_usage(stderr, v);
        return 2;
    }
    if (v->offline)
        return v->run(&c, argv + optind + 1, n_args);
    if (pl_tx_ctx_new(&c.ctx) || pl_tx_sock_new(c.ctx, PL_TX_DEALER, &c.sock))
        rc = pl_pipectl_die("%s", pl_error_msg());
    else if (pl_tx_key_client_setup(c.sock, key, key_file, "admin", NULL))
        rc = pl_pipectl_die("%s", pl_error_msg());
    else if (pl_tx_sock_connect(c.sock, c.endpoint))
        rc = pl_pipectl_die("bad coordinator endpoint '%s'", c.endpoint);
    else
        rc = v->run(&c, argv + optind + 1, n_args);
    pl_tx_sock_destroy(&c.sock);
    pl_tx_ctx_destroy(&c.ctx);
    return rc;
}
