/* Tests of the cluster, node and job YAML loaders on files: paths resolved against the file, the
 * shipped examples and the embedded default, every prefix and many one-byte changes of valid
 * documents, and the coordinator's node endpoint. */
#include "config_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- paths and files ---- */

Test(config_files, job_relative_paths)
{
    pl_cfg_job_t j;
    const char *yaml = "model: models/tiny\nprompts: /abs/p.jsonl\n";
    cr_assert_eq(pl_cfg_job_parse(yaml, strlen(yaml), "x", "/srv/jobs", &j), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_str_eq(j.model, "/srv/jobs/models/tiny");
    cr_assert_str_eq(j.prompts, "/abs/p.jsonl");
    cr_assert_eq(pl_cfg_job_parse(yaml, strlen(yaml), "x", "rel/dir", &j), PL_OK);
    cr_assert_str_eq(j.model, "rel/dir/models/tiny");
    cr_assert_eq(pl_cfg_job_parse(yaml, strlen(yaml), "x", NULL, &j), PL_OK);
    cr_assert_str_eq(j.model, "models/tiny");
}

Test(config_files, job_load_resolves_against_file_dir)
{
    char dir[] = "/tmp/pl_cfg_XXXXXX", path[256];
    FILE *f;
    pl_cfg_job_t j;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/job.yaml", dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("model: sub/m\nprompts: p.jsonl\nmax_new_tokens: x\n", f);
    fclose(f);
    /* Errors from a file carry its path. */
    char want[512];
    snprintf(want, sizeof(want), "%s:3:17: key 'max_new_tokens': expected an integer", path);
    EXPECT_ERR(pl_cfg_job_load(path, &j), PL_ERR_INVALID, want);

    f = fopen(path, "w");
    fputs("model: sub/m\nprompts: p.jsonl\n", f);
    fclose(f);
    cr_assert_eq(pl_cfg_job_load(path, &j), PL_OK, "%s", pl_error_msg());
    snprintf(want, sizeof(want), "%s/sub/m", dir);
    cr_assert_str_eq(j.model, want);
    snprintf(want, sizeof(want), "%s/p.jsonl", dir);
    cr_assert_str_eq(j.prompts, want);
    unlink(path);
    rmdir(dir);
    cr_assert_eq(pl_cfg_job_load(path, &j), PL_ERR_NOT_FOUND);
    cr_assert_not_null(strstr(pl_error_msg(), path));
}

Test(config_files, default_cluster_parses)
{
    pl_cfg_cluster_t c;
    cr_assert_eq(pl_cfg_cluster_parse(pl_cfg_default_cluster_yaml,
                                      strlen(pl_cfg_default_cluster_yaml), "default", &c),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.endpoint, "tcp://127.0.0.1:5555");
    cr_assert_eq(c.n_nodes, 3);
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "node%d", i);
        cr_assert_str_eq(c.nodes[i].name, name);
        cr_assert_str_eq(c.nodes[i].address, "127.0.0.1");
        cr_assert_eq(c.nodes[i].threads, 1);
    }
}

Test(config_files, etc_examples_parse)
{
    pl_cfg_cluster_t c;
    pl_cfg_node_t n;
    pl_cfg_job_t j;
    cr_assert_eq(pl_cfg_cluster_load(PL_SOURCE_DIR "/etc/cluster.yaml", &c), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(c.n_nodes, 3);
    cr_assert_str_eq(c.nodes[2].name, "cpu0");
    cr_assert_eq(c.nodes[2].threads, 32);
    cr_assert_eq(pl_cfg_node_load(PL_SOURCE_DIR "/etc/pipeld.yaml", &n), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_str_eq(n.name, "node0");
    cr_assert_eq(n.n_devices, 1);
    cr_assert_eq(pl_cfg_job_load(PL_SOURCE_DIR "/etc/job.yaml", &j), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(j.model, PL_SOURCE_DIR "/etc/models/tiny");
    cr_assert_str_eq(j.prompts, PL_SOURCE_DIR "/etc/prompts.jsonl");
    cr_assert_eq(access(j.prompts, R_OK), 0);
}

Test(config_files, etc_prompts_are_token_arrays)
{
    FILE *f = fopen(PL_SOURCE_DIR "/etc/prompts.jsonl", "r");
    char line[1024];
    int n_lines = 0;
    cr_assert_not_null(f);
    while (fgets(line, sizeof(line), f)) {
        json_error_t jerr;
        json_t *arr = json_loads(line, 0, &jerr);
        size_t i;
        json_t *v;
        cr_assert(json_is_array(arr), "line %d: %s", n_lines + 1, jerr.text);
        cr_assert_gt(json_array_size(arr), 0);
        json_array_foreach(arr, i, v)
        {
            cr_assert(json_is_integer(v));
            cr_assert(json_integer_value(v) >= 0 && json_integer_value(v) < 256);
        }
        json_decref(arr);
        n_lines++;
    }
    fclose(f);
    cr_assert_eq(n_lines, 4);
}

/* ---- robustness: every prefix and many one-byte changes of valid files ---- */

static void s_try_all(const char *text, size_t len)
{
    /* An exact-size copy, so reading past `len` is caught under ASan. */
    char *copy = malloc(len ? len : 1);
    pl_cfg_cluster_t *c = malloc(sizeof(*c));
    pl_cfg_node_t n;
    pl_cfg_job_t j;
    memcpy(copy, text, len);
    if (pl_cfg_cluster_parse(copy, len, "f", c) != PL_OK)
        cr_assert(strncmp(pl_error_msg(), "f:", 2) == 0, "%s", pl_error_msg());
    if (pl_cfg_node_parse(copy, len, "f", &n) != PL_OK)
        cr_assert(strncmp(pl_error_msg(), "f:", 2) == 0, "%s", pl_error_msg());
    if (pl_cfg_job_parse(copy, len, "f", "/b", &j) != PL_OK)
        cr_assert(strncmp(pl_error_msg(), "f:", 2) == 0, "%s", pl_error_msg());
    free(c);
    free(copy);
}

Test(config_files, truncations_and_mutations_never_crash, .timeout = 60)
{
    const char *texts[] = {TCFG_CLUSTER_FULL, TCFG_NODE_FULL, TCFG_JOB_FULL,
                           pl_cfg_default_cluster_yaml};
    static const char subst[] = ":-[{'\"&*!#\n \t0";
    for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
        size_t len = strlen(texts[t]);
        char *m = strdup(texts[t]);
        for (size_t cut = 0; cut <= len; cut++)
            s_try_all(texts[t], cut);
        for (size_t i = 0; i < len; i++) {
            for (size_t k = 0; k < sizeof(subst) - 1; k++) {
                char was = m[i];
                m[i] = subst[k];
                s_try_all(m, len);
                m[i] = was;
            }
        }
        free(m);
    }
}

/* ---- the coordinator's node endpoint ---- */

Test(config_files, node_endpoint_keys_and_derivation)
{
    pl_cfg_cluster_t c;
    pl_cfg_node_t n;
    char out[256];
    cr_assert_eq(s_cluster(CLUSTER_HEAD "  node_endpoint: ipc:///run/pl/nodes\n", &c), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_str_eq(c.node_endpoint, "ipc:///run/pl/nodes");
    cr_assert_eq(s_cluster(CLUSTER_HEAD, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.node_endpoint, "", "absent: derived where it is used");
    cr_assert_neq(s_cluster(CLUSTER_HEAD "  node_endpoint: http://x\n", &c), PL_OK);
    cr_assert(strstr(pl_error_msg(), "node_endpoint"), "%s", pl_error_msg());
    cr_assert_eq(s_node(NODE_HEAD "coordinator_node_endpoint: tcp://10.0.0.1:7001\n", &n), PL_OK,
                 "%s", pl_error_msg());
    cr_assert_str_eq(n.coordinator_node, "tcp://10.0.0.1:7001");
    cr_assert_eq(s_node(NODE_HEAD, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(n.coordinator_node, "");
    static const char *const derived[][2] = {
        {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"},
        {"tcp://0.0.0.0:1", "tcp://0.0.0.0:2"},
        {"tcp://[::1]:7000", "tcp://[::1]:7001"},
        {"tcp://pipecoord:65534", "tcp://pipecoord:65535"},
        {"ipc:///tmp/pl.sock", "ipc:///tmp/pl.sock.nodes"},
        {"inproc://coord", "inproc://coord.nodes"},
    };
    for (size_t i = 0; i < sizeof(derived) / sizeof(derived[0]); i++) {
        cr_assert_eq(pl_cfg_node_endpoint(derived[i][0], NULL, out, sizeof(out)), PL_OK, "%s: %s",
                     derived[i][0], pl_error_msg());
        cr_expect_str_eq(out, derived[i][1], "%s", derived[i][0]);
        cr_assert_eq(pl_cfg_node_endpoint(derived[i][0], "", out, sizeof(out)), PL_OK);
        cr_expect_str_eq(out, derived[i][1], "\"\" is not set");
    }
    cr_assert_eq(pl_cfg_node_endpoint("tcp://a:1", "tcp://b:9", out, sizeof(out)), PL_OK);
    cr_expect_str_eq(out, "tcp://b:9", "a node endpoint that is set is taken as it is");
    static const char *const refused[] = {"tcp://127.0.0.1:65535", "tcp://127.0.0.1:*",
                                          "tcp://127.0.0.1", "tcp://h:0", "tcp://h:12x",
                                          "tcp://h:", "udp://h:1"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        cr_expect_neq(pl_cfg_node_endpoint(refused[i], NULL, out, sizeof(out)), PL_OK, "%s",
                      refused[i]);
        cr_expect(strstr(pl_error_msg(), refused[i]), "the error names the endpoint: %s",
                  pl_error_msg());
    }
    char small[20];
    cr_expect_eq(pl_cfg_node_endpoint("ipc:///tmp/long-name", NULL, small, sizeof(small)),
                 PL_ERR_RANGE);
}
