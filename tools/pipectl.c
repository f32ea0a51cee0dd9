/* pipectl: submit and watch jobs, plan them (on the live cluster or a described one), list
 * nodes, ask their health. This file reads the settings (flags, then environment, then the
 * user file) and runs the verb (tools/pipectl/). */
#include "common/config.h"
#include "tools/pipectl/pipectl.h"
#include "transport/keys.h"
#include "transport/sock.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Which PL_PIPECTL_OPT_* an option letter is (0: every verb takes it). */
static unsigned s_opt_bit(int o)
{
    switch (o) {
    case 'w': return PL_PIPECTL_OPT_WAIT;
    case 's': return PL_PIPECTL_OPT_STAGES;
    case 'C': return PL_PIPECTL_OPT_CLUSTER;
    case 'W': return PL_PIPECTL_OPT_WATCH;
    case 'S': return PL_PIPECTL_OPT_SVG;
    case PL_PIPECTL_GEN_MAX_TOKENS:
    case PL_PIPECTL_GEN_TEMPERATURE:
    case PL_PIPECTL_GEN_CHAT:
    case PL_PIPECTL_GEN_STOP: return PL_PIPECTL_OPT_GEN;
    default: return 0;
    }
}

/* The first set environment variable of the two (the second: the older name). */
static const char *s_env(const char *name, const char *old)
{
    const char *v = getenv(name);
    if ((!v || !*v) && old)
        v = getenv(old);
    return v && *v ? v : NULL;
}

/* The user file: $PIPECTL_CONFIG, else $XDG_CONFIG_HOME/pipeld/pipectl.yaml, else
 * ~/.config/pipeld/pipectl.yaml. A missing default file is no error; a bad one is. */
static int s_user_file(pl_cfg_pipectl_t *cfg)
{
    char path[4096];
    const char *explicit_path = s_env("PIPECTL_CONFIG", NULL), *xdg = s_env("XDG_CONFIG_HOME", NULL),
               *home = s_env("HOME", NULL);
    struct stat sb;
    if (explicit_path)
        snprintf(path, sizeof(path), "%s", explicit_path);
    else if (xdg)
        snprintf(path, sizeof(path), "%s/pipeld/pipectl.yaml", xdg);
    else if (home)
        snprintf(path, sizeof(path), "%s/.config/pipeld/pipectl.yaml", home);
    else
        return 0;
    if (!explicit_path && stat(path, &sb) != 0)
        return 0;
    if (pl_cfg_pipectl_load(path, cfg)) {
        pl_pipectl_die("%s", pl_error_msg());
        return PL_PIPECTL_EXIT_USAGE;
    }
    return 0;
}

/* An -o word; false when it is none. */
static bool s_output(const char *word, pl_pipectl_t *c)
{
    for (int i = 0; pl_cfg_output_names[i]; i++)
        if (!strcmp(word, pl_cfg_output_names[i])) {
            c->out = (pl_pipectl_out_t)i;
            c->json = c->out == PL_PIPECTL_OUT_JSON || c->out == PL_PIPECTL_OUT_YAML;
            return true;
        }
    return false;
}

static bool s_timeout(const char *word, double *out)
{
    char *end;
    double v = strtod(word, &end);
    if (!*word || *end || !(v > 0) || v > 3600)
        return false;
    *out = v;
    return true;
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
                                         {"watch", no_argument, NULL, 'W'},
                                         {"svg", required_argument, NULL, 'S'},
                                         {"max-tokens", required_argument, NULL,
                                          PL_PIPECTL_GEN_MAX_TOKENS},
                                         {"temperature", required_argument, NULL,
                                          PL_PIPECTL_GEN_TEMPERATURE},
                                         {"chat", no_argument, NULL, PL_PIPECTL_GEN_CHAT},
                                         {"stop", required_argument, NULL, PL_PIPECTL_GEN_STOP},
                                         {NULL, 0, NULL, 0}};
    pl_pipectl_t c = {.endpoint = "tcp://127.0.0.1:5555", .timeout_s = 10, .stages = -1};
    const char *key = NULL;      /* CURVE: the coordinator's public key */
    const char *key_file = NULL; /* CURVE: this client's secret key */
    const char *output = NULL, *timeout = NULL, *v_env, *o_flag = NULL;
    static pl_cfg_pipectl_t cfg;
    unsigned given = 0; /* PL_PIPECTL_OPT_* seen */
    bool help = false;
    int o, rc;

    /* lowest first: the user file, then the environment; the flags below override both */
    if ((rc = s_user_file(&cfg)))
        return rc;
    if (cfg.coordinator[0])
        c.endpoint = cfg.coordinator;
    if (cfg.coordinator_key[0])
        key = cfg.coordinator_key;
    if (cfg.key_file[0])
        key_file = cfg.key_file;
    if (cfg.output[0])
        s_output(cfg.output, &c); /* the schema allows only the -o words */
    if (cfg.timeout_s > 0)
        c.timeout_s = cfg.timeout_s;
    if ((v_env = s_env("PIPECTL_COORDINATOR", "PIPELD_COORDINATOR")))
        c.endpoint = v_env;
    if ((v_env = s_env("PIPECTL_COORDINATOR_KEY", "PIPELD_COORDINATOR_KEY")))
        key = v_env;
    if ((v_env = s_env("PIPECTL_KEY_FILE", "PIPELD_KEY_FILE")))
        key_file = v_env;
    if ((output = s_env("PIPECTL_OUTPUT", NULL)) && !s_output(output, &c)) {
        pl_pipectl_die("$PIPECTL_OUTPUT: '%s' is not table, wide, json or yaml", output);
        return PL_PIPECTL_EXIT_USAGE;
    }
    if ((timeout = s_env("PIPECTL_TIMEOUT", NULL)) && !s_timeout(timeout, &c.timeout_s)) {
        pl_pipectl_die("$PIPECTL_TIMEOUT: '%s' is not seconds in (0, 3600]", timeout);
        return PL_PIPECTL_EXIT_USAGE;
    }
    /* GNU getopt moves the command words after the options, wherever the user put them */
    while ((o = getopt_long(argc, argv, "c:k:K:o:T:ws:C:h", opts, NULL)) != -1) {
        given |= s_opt_bit(o);
        switch (o) {
        case 'c': c.endpoint = optarg; break;
        case 'k': key = optarg; break;
        case 'K': key_file = optarg; break;
        case 'o': o_flag = optarg; break; /* a format, or trace's file: the verb says */
        case 'S': c.svg = optarg; break;
        case 'T':
            if (!s_timeout(optarg, &c.timeout_s)) {
                pl_pipectl_die("--timeout: '%s' is not seconds in (0, 3600]", optarg);
                return PL_PIPECTL_EXIT_USAGE;
            }
            break;
        case 'W': c.watch = true; break;
        case 'w': c.wait = true; break;
        case 's': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 64) {
                pl_pipectl_die("--stages: '%s' is not a count in [0, 64]", optarg);
                return PL_PIPECTL_EXIT_USAGE;
            }
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
                return PL_PIPECTL_EXIT_USAGE;
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
    if (o_flag && (v->opts & PL_PIPECTL_OPT_OUTFILE)) {
        c.out_file = o_flag;
    } else if (o_flag && !s_output(o_flag, &c)) {
        pl_pipectl_die("-o takes table, wide, json or yaml, not '%s'", o_flag);
        return PL_PIPECTL_EXIT_USAGE;
    }
    if (given & ~v->opts) {
        if (given & ~v->opts & PL_PIPECTL_OPT_GEN) {
            pl_pipectl_die("--max-tokens, --temperature, --chat and --stop are generate's "
                           "options, not %s's",
                           v->name);
            return PL_PIPECTL_EXIT_USAGE;
        }
        fprintf(stderr, "pipectl: %s does not take that option\n", v->name);
        pl_pipectl_verb_usage(stderr, v);
        return 2;
    }
    if (v->offline)
        return v->run(&c, argv + optind + 1, n_args);
    if (pl_tx_ctx_new(&c.ctx) || pl_tx_sock_new(c.ctx, PL_TX_DEALER, &c.sock)) {
        rc = pl_pipectl_die("%s", pl_error_msg());
    } else if (pl_tx_key_client_setup(c.sock, key, key_file, "admin", NULL)) {
        rc = pl_pipectl_die("%s", pl_error_msg());
    } else if (pl_tx_sock_connect(c.sock, c.endpoint)) {
        pl_pipectl_die("bad coordinator endpoint '%s'", c.endpoint);
        rc = PL_PIPECTL_EXIT_USAGE;
    } else {
        rc = v->run(&c, argv + optind + 1, n_args);
    }
    pl_tx_sock_destroy(&c.sock);
    pl_tx_ctx_destroy(&c.ctx);
    return rc;
}
