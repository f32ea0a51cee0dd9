/* Tests of the cluster, node and job YAML loaders: every key, defaults, each kind of error with
 * its exact position and key; paths, files and robustness are test_config_files.c's. */
#include "config_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char s_cluster_full[] = TCFG_CLUSTER_FULL;
static const char s_node_full[] = TCFG_NODE_FULL;
static const char s_job_full[] = TCFG_JOB_FULL;

/* ---- every key ---- */

Test(config, cluster_every_key)
{
    pl_cfg_cluster_t c;
    cr_assert_eq(s_cluster(s_cluster_full, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.endpoint, "tcp://10.1.2.3:7000");
    cr_assert_eq(c.heartbeat_ms, 250);
    cr_assert_eq(c.dead_after_ms, 1000);
    cr_assert_str_eq(c.public_key, PUB_KEY);
    cr_assert_str_eq(c.secret_key, SEC_KEY);
    cr_assert_eq(c.n_nodes, 2);
    cr_assert_str_eq(c.nodes[0].name, "a-1");
    cr_assert_str_eq(c.nodes[0].address, "host.example");
    cr_assert_eq(c.nodes[0].threads, 8);
    cr_assert_eq(c.nodes[0].max_devices, 2);
    cr_assert_eq(c.nodes[0].n_labels, 2);
    cr_assert_str_eq(c.nodes[0].labels[0], "cpu");
    cr_assert_str_eq(c.nodes[0].labels[1], "fast");
    cr_assert_str_eq(c.nodes[1].name, "b_2.x");
    cr_assert_str_eq(c.nodes[1].address, "::1");
    cr_assert_eq(c.nodes[1].threads, 0);
    cr_assert_eq(c.nodes[1].n_labels, 0);
}

Test(config, node_every_key)
{
    pl_cfg_node_t n;
    cr_assert_eq(s_node(s_node_full, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(n.name, "gpu0");
    cr_assert_str_eq(n.coordinator, "tcp://10.0.0.1:6000");
    cr_assert_eq(n.n_devices, 3);
    cr_assert_str_eq(n.devices[0], "cuda");
    cr_assert_str_eq(n.devices[1], "cpu");
    cr_assert_str_eq(n.devices[2], "hip");
    cr_assert_eq(n.threads, 12);
    cr_assert_eq(n.memory_reserve_mb, 2048);
    cr_assert_eq(n.heartbeat_ms, 100);
    cr_assert_str_eq(n.log_level, "debug");
}

Test(config, job_every_key)
{
    pl_cfg_job_t j;
    cr_assert_eq(s_job(s_job_full, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(j.model, "/models/llama");
    cr_assert_str_eq(j.prompts, "/data/p.jsonl");
    cr_assert_eq(j.gen.max_new_tokens, 128);
    cr_assert_eq(j.gen.min_new_tokens, 12);
    cr_assert_float_eq(j.gen.temperature, 0.7f, 1e-7);
    cr_assert_eq(j.gen.top_k, 40);
    cr_assert_float_eq(j.gen.top_p, 0.95f, 1e-7);
    cr_assert_eq(j.gen.seed, UINT64_MAX);
    cr_assert_eq(j.microbatches, 8);
    cr_assert_eq(j.gen.prefill_chunk, 256);
    cr_assert_str_eq(j.gen.wire_dtype, "bf16");
    cr_assert_eq(j.stages, 4);
    cr_assert_eq(j.gen.stop_at_eos, false);
    cr_assert_eq(j.n_nodes, 2);
    cr_assert_str_eq(j.nodes[0], "node0");
    cr_assert_str_eq(j.nodes[1], "node1");
}

/* ---- defaults ---- */

Test(config, cluster_defaults)
{
    pl_cfg_cluster_t c;
    cr_assert_eq(s_cluster(CLUSTER_HEAD "nodes:\n  - name: x\n", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.endpoint, "tcp://127.0.0.1:5555");
    cr_assert_eq(c.heartbeat_ms, 500);
    cr_assert_eq(c.dead_after_ms, 3000);
    cr_assert_str_eq(c.public_key, "");
    cr_assert_str_eq(c.secret_key, "");
    cr_assert_eq(c.n_nodes, 1);
    cr_assert_str_eq(c.nodes[0].address, "127.0.0.1");
    cr_assert_eq(c.nodes[0].threads, 0);
    cr_assert_eq(c.nodes[0].max_devices, 0);
    cr_assert_eq(c.nodes[0].n_labels, 0);
    cr_assert_eq(s_cluster(CLUSTER_HEAD, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.n_nodes, 0);
}

Test(config, node_defaults)
{
    pl_cfg_node_t n;
    cr_assert_eq(s_node(NODE_HEAD, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n.n_devices, 0);
    cr_assert_eq(n.threads, 0);
    cr_assert_eq(n.memory_reserve_mb, 512);
    cr_assert_eq(n.heartbeat_ms, 500);
    cr_assert_str_eq(n.log_level, "info");
}

Test(config, job_defaults)
{
    pl_cfg_job_t j;
    cr_assert_eq(s_job(JOB_HEAD, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(j.model, "m");
    cr_assert_str_eq(j.prompts, "p.jsonl");
    cr_assert_eq(j.gen.max_new_tokens, 16);
    cr_assert_eq(j.gen.min_new_tokens, 0);
    cr_assert_eq(j.gen.temperature, 0.0f);
    cr_assert_eq(j.gen.top_k, 0);
    cr_assert_eq(j.gen.top_p, 1.0f);
    cr_assert_eq(j.gen.seed, 0);
    cr_assert_eq(j.microbatches, 0);
    cr_assert_eq(j.gen.prefill_chunk, 0);
    cr_assert_str_eq(j.gen.wire_dtype, "f32");
    cr_assert_eq(j.stages, 0);
    cr_assert_eq(j.gen.stop_at_eos, true);
    cr_assert_eq(j.n_nodes, 0);
    /* A partly given mapping keeps the defaults of its other keys. */
    cr_assert_eq(s_job(JOB_HEAD "sampling:\n  top_k: 5\n", &j), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(j.gen.top_k, 5);
    cr_assert_eq(j.gen.top_p, 1.0f);
    cr_assert_eq(j.gen.temperature, 0.0f);
}

/* ---- values ---- */

Test(config, booleans)
{
    static const struct {
        const char *text;
        bool value;
    } cases[] = {{"true", true}, {"false", false}, {"yes", true},
                 {"no", false},  {"True", true},   {"NO", false}};
    char yaml[128];
    pl_cfg_job_t j;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(yaml, sizeof(yaml), JOB_HEAD "stop_at_eos: %s\n", cases[i].text);
        cr_assert_eq(s_job(yaml, &j), PL_OK, "%s: %s", cases[i].text, pl_error_msg());
        cr_assert_eq(j.gen.stop_at_eos, cases[i].value, "%s", cases[i].text);
    }
    EXPECT_ERR(s_job(JOB_HEAD "stop_at_eos: maybe\n", &j), PL_ERR_INVALID,
               "j.yaml:3:14: key 'stop_at_eos': expected a boolean (true, false, yes, no)");
    EXPECT_ERR(s_job(JOB_HEAD "stop_at_eos: 1\n", &j), PL_ERR_INVALID,
               "j.yaml:3:14: key 'stop_at_eos': expected a boolean (true, false, yes, no)");
    EXPECT_ERR(s_job(JOB_HEAD "stop_at_eos: \"true\"\n", &j), PL_ERR_INVALID,
               "j.yaml:3:14: key 'stop_at_eos': expected a boolean (true, false, yes, no)");
}

Test(config, numbers)
{
    pl_cfg_job_t j;
    cr_assert_eq(s_job(JOB_HEAD "max_new_tokens: 65536\nsampling: {temperature: 100, top_p: "
                                "1e-3, top_k: +7}\n",
                       &j),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(j.gen.max_new_tokens, 65536);
    cr_assert_eq(j.gen.temperature, 100.0f);
    cr_assert_float_eq(j.gen.top_p, 0.001f, 1e-9);
    cr_assert_eq(j.gen.top_k, 7);
    cr_assert_eq(s_job(JOB_HEAD "max_new_tokens: 1\nsampling: {top_p: .5}\n", &j), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(j.gen.max_new_tokens, 1);
    cr_assert_eq(j.gen.top_p, 0.5f);
}

/* ---- errors, each with its exact position and key ---- */

Test(config, error_type)
{
    pl_cfg_job_t j;
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_p: abc\n", &j), PL_ERR_INVALID,
               "j.yaml:4:10: key 'sampling.top_p': expected a number");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_p: nan\n", &j), PL_ERR_INVALID,
               "j.yaml:4:10: key 'sampling.top_p': expected a number");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_p: 0x1p-1\n", &j), PL_ERR_INVALID,
               "j.yaml:4:10: key 'sampling.top_p': expected a number");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_k: 1.5\n", &j), PL_ERR_INVALID,
               "j.yaml:4:10: key 'sampling.top_k': expected an integer");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: 16abc\n", &j), PL_ERR_INVALID,
               "j.yaml:3:17: key 'max_new_tokens': expected an integer");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: 1e3\n", &j), PL_ERR_INVALID,
               "j.yaml:3:17: key 'max_new_tokens': expected an integer");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: '16'\n", &j), PL_ERR_INVALID,
               "j.yaml:3:17: key 'max_new_tokens': expected an integer");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens:\n", &j), PL_ERR_INVALID,
               "j.yaml:3:16: key 'max_new_tokens': expected an integer");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: [1]\n", &j), PL_ERR_INVALID,
               "j.yaml:3:17: key 'max_new_tokens': expected an integer");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  seed: -1\n", &j), PL_ERR_INVALID,
               "j.yaml:4:9: key 'sampling.seed': expected a non-negative integer");
    EXPECT_ERR(s_job("model: ~\nprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:1:8: key 'model': expected a string");
    EXPECT_ERR(s_job("model: {a: b}\nprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:1:8: key 'model': expected a string");
    EXPECT_ERR(s_job("model: ''\nprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:1:8: key 'model': must not be empty");
    EXPECT_ERR(s_job("model: \"a\\0b\"\nprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:1:8: key 'model': string contains a NUL byte");
    EXPECT_ERR(s_job(JOB_HEAD "placement:\n  nodes: node0\n", &j), PL_ERR_INVALID,
               "j.yaml:4:10: key 'placement.nodes': expected a sequence");
}

Test(config, error_unknown_key)
{
    pl_cfg_job_t j;
    pl_cfg_cluster_t c;
    EXPECT_ERR(s_job(JOB_HEAD "foo: 1\n", &j), PL_ERR_INVALID, "j.yaml:3:1: unknown key 'foo'");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  temp: 1\n", &j), PL_ERR_INVALID,
               "j.yaml:4:3: unknown key 'sampling.temp'");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - name: a\n    adress: b\n", &c), PL_ERR_INVALID,
               "c.yaml:5:5: unknown key 'nodes[0].adress'");
    EXPECT_ERR(s_job(JOB_HEAD "? [a]\n: b\n", &j), PL_ERR_INVALID,
               "j.yaml:3:3: expected a string key");
}

Test(config, error_missing_key)
{
    pl_cfg_job_t j;
    pl_cfg_cluster_t c;
    pl_cfg_node_t n;
    EXPECT_ERR(s_job("prompts: p\nmax_new_tokens: 4\n", &j), PL_ERR_INVALID,
               "j.yaml:1:1: missing required key 'model'");
    EXPECT_ERR(s_job("model: m\n", &j), PL_ERR_INVALID,
               "j.yaml:1:1: missing required key 'prompts'");
    EXPECT_ERR(s_cluster("nodes: []\n", &c), PL_ERR_INVALID,
               "c.yaml:1:1: missing required key 'coordinator'");
    EXPECT_ERR(s_cluster("coordinator:\n  heartbeat_ms: 100\n", &c), PL_ERR_INVALID,
               "c.yaml:2:3: missing required key 'coordinator.endpoint'");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - name: a\n  - address: b\n", &c), PL_ERR_INVALID,
               "c.yaml:5:5: missing required key 'nodes[1].name'");
    EXPECT_ERR(s_node("coordinator: tcp://h:1\n", &n), PL_ERR_INVALID,
               "n.yaml:1:1: missing required key 'name'");
    EXPECT_ERR(s_node("name: a\n", &n), PL_ERR_INVALID,
               "n.yaml:1:1: missing required key 'coordinator'");
}

Test(config, error_range)
{
    pl_cfg_job_t j;
    pl_cfg_cluster_t c;
    pl_cfg_node_t n;
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: 0\n", &j), PL_ERR_RANGE,
               "j.yaml:3:17: key 'max_new_tokens': value 0 out of range [1, 65536]");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: 65537\n", &j), PL_ERR_RANGE,
               "j.yaml:3:17: key 'max_new_tokens': value 65537 out of range [1, 65536]");
    /* 2^32 + 16 would be 16 after a careless cast to int. */
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: 4294967312\n", &j), PL_ERR_RANGE,
               "j.yaml:3:17: key 'max_new_tokens': value 4294967312 out of range [1, 65536]");
    EXPECT_ERR(s_job(JOB_HEAD "max_new_tokens: 99999999999999999999\n", &j), PL_ERR_RANGE,
               "j.yaml:3:17: key 'max_new_tokens': value 99999999999999999999 out of range "
               "[1, 65536]");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_p: 0\n", &j), PL_ERR_RANGE,
               "j.yaml:4:10: key 'sampling.top_p': value 0 out of range (0, 1]");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_p: 1.0001\n", &j), PL_ERR_RANGE,
               "j.yaml:4:10: key 'sampling.top_p': value 1.0001 out of range (0, 1]");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  temperature: -0.1\n", &j), PL_ERR_RANGE,
               "j.yaml:4:16: key 'sampling.temperature': value -0.1 out of range [0, 100]");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  temperature: 1e400\n", &j), PL_ERR_RANGE,
               "j.yaml:4:16: key 'sampling.temperature': value 1e400 out of range [0, 100]");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  top_k: 1000001\n", &j), PL_ERR_RANGE,
               "j.yaml:4:10: key 'sampling.top_k': value 1000001 out of range [0, 1000000]");
    EXPECT_ERR(s_job(JOB_HEAD "sampling:\n  seed: 18446744073709551616\n", &j), PL_ERR_RANGE,
               "j.yaml:4:9: key 'sampling.seed': value 18446744073709551616 out of range "
               "[0, 18446744073709551615]");
    EXPECT_ERR(s_job(JOB_HEAD "microbatches: 1025\n", &j), PL_ERR_RANGE,
               "j.yaml:3:15: key 'microbatches': value 1025 out of range [0, 1024]");
    pl_status_t wst = s_job(JOB_HEAD "wire_dtype: fp8\n", &j);
    cr_assert_neq(wst, PL_OK);
    cr_assert(strstr(pl_error_msg(), "j.yaml:3:") && strstr(pl_error_msg(), "wire_dtype") &&
                  strstr(pl_error_msg(), "bf16"),
              "%s", pl_error_msg());
    EXPECT_ERR(s_job(JOB_HEAD "prefill_chunk: 65537\n", &j), PL_ERR_RANGE,
               "j.yaml:3:16: key 'prefill_chunk': value 65537 out of range [0, 65536]");
    EXPECT_ERR(s_job(JOB_HEAD "stages: -1\n", &j), PL_ERR_RANGE,
               "j.yaml:3:9: key 'stages': value -1 out of range [0, 64]");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - {name: a, threads: -1}\n", &c), PL_ERR_RANGE,
               "c.yaml:4:24: key 'nodes[0].threads': value -1 out of range [0, 4096]");
    EXPECT_ERR(s_node(NODE_HEAD "memory_reserve_mb: 1048577\n", &n), PL_ERR_RANGE,
               "n.yaml:3:20: key 'memory_reserve_mb': value 1048577 out of range [0, 1048576]");
}

Test(config, error_duplicate_key)
{
    pl_cfg_job_t j;
    pl_cfg_cluster_t c;
    EXPECT_ERR(s_job(JOB_HEAD "model: n\n", &j), PL_ERR_INVALID,
               "j.yaml:3:1: duplicate key 'model'");
    EXPECT_ERR(s_job(JOB_HEAD "sampling: {seed: 1, seed: 2}\n", &j), PL_ERR_INVALID,
               "j.yaml:3:21: duplicate key 'sampling.seed'");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - name: a\n  - name: b\n  - name: a\n", &c),
               PL_ERR_INVALID,
               "c.yaml:6:11: key 'nodes[2].name': duplicate value 'a' (also in entry 0)");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - {name: a, labels: [x, y, x]}\n", &c),
               PL_ERR_INVALID, "c.yaml:4:30: key 'nodes[0].labels[2]': duplicate value 'x'");
    EXPECT_ERR(s_job(JOB_HEAD "placement: {nodes: [n1, n1]}\n", &j), PL_ERR_INVALID,
               "j.yaml:3:25: key 'placement.nodes[1]': duplicate value 'n1'");
}

Test(config, error_expected_mapping)
{
    pl_cfg_job_t j;
    pl_cfg_cluster_t c;
    EXPECT_ERR(s_job("- a\n- b\n", &j), PL_ERR_INVALID, "j.yaml:1:1: expected a mapping");
    EXPECT_ERR(s_job("just text\n", &j), PL_ERR_INVALID, "j.yaml:1:1: expected a mapping");
    EXPECT_ERR(s_job(JOB_HEAD "sampling: 5\n", &j), PL_ERR_INVALID,
               "j.yaml:3:11: key 'sampling': expected a mapping");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - a\n", &c), PL_ERR_INVALID,
               "c.yaml:4:5: key 'nodes[0]': expected a mapping");
}

Test(config, error_document)
{
    pl_cfg_job_t j;
    EXPECT_ERR(s_job("", &j), PL_ERR_INVALID, "j.yaml:1:1: empty document: expected a mapping");
    EXPECT_ERR(s_job("# nothing\n", &j), PL_ERR_INVALID,
               "j.yaml:1:1: empty document: expected a mapping");
    EXPECT_ERR(s_job(JOB_HEAD "---\n" JOB_HEAD, &j), PL_ERR_INVALID,
               "j.yaml:3:1: more than one document; a config file holds exactly one");
    EXPECT_ERR(s_job("model: &m x\nprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:1:8: anchors are not supported");
    EXPECT_ERR(s_job("model: x\nprompts: *m\n", &j), PL_ERR_INVALID,
               "j.yaml:2:10: aliases are not supported");
    EXPECT_ERR(s_job("model: !!str x\nprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:1:8: tags are not supported");
}

Test(config, error_syntax)
{
    pl_cfg_job_t j;
    EXPECT_ERR(s_job("model: m\nprompts: [p\n", &j), PL_ERR_INVALID,
               "j.yaml:3:1: syntax error: did not find expected ',' or ']' "
               "(while parsing a flow sequence at 2:10)");
    EXPECT_ERR(s_job("model: m\n  prompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:2:10: syntax error: mapping values are not allowed in this context");
    EXPECT_ERR(s_job("model: m\n\tprompts: p\n", &j), PL_ERR_INVALID,
               "j.yaml:2:1: syntax error: found a tab character that violates indentation "
               "(while scanning a plain scalar at 1:8)");
    /* Invalid UTF-8 is a reader error with a byte offset, still shown as line:column. */
    EXPECT_ERR(s_job("model: m\nprompts: \xff\n", &j), PL_ERR_INVALID,
               "j.yaml:2:10: syntax error: invalid leading UTF-8 octet");
}

Test(config, error_nesting)
{
    char yaml[512] = JOB_HEAD "sampling: ";
    size_t n = strlen(yaml);
    pl_cfg_job_t j;
    for (int i = 0; i < 100; i++)
        yaml[n++] = '[';
    yaml[n] = '\0';
    /* The root mapping is level 1, so the 32nd bracket is one too many. */
    EXPECT_ERR(s_job(yaml, &j), PL_ERR_INVALID, "j.yaml:3:42: nesting is too deep");
}

Test(config, error_values)
{
    pl_cfg_cluster_t c;
    pl_cfg_node_t n;
    pl_cfg_job_t j;
    EXPECT_ERR(s_cluster("coordinator:\n  endpoint: http://h:1\n", &c), PL_ERR_INVALID,
               "c.yaml:2:13: key 'coordinator.endpoint': 'http://h:1' is not an endpoint like "
               "tcp://HOST:PORT, ipc://PATH or inproc://NAME");
    EXPECT_ERR(s_cluster("coordinator:\n  endpoint: 'tcp://h :1'\n", &c), PL_ERR_INVALID,
               "c.yaml:2:13: key 'coordinator.endpoint': endpoint 'tcp://h :1' contains a space "
               "or control character");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "  dead_after_ms: 500\n", &c), PL_ERR_INVALID,
               "c.yaml:2:3: key 'coordinator': dead_after_ms (500) must be greater than "
               "heartbeat_ms (500)");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "security:\n  coordinator_secret_key: '" SEC_KEY "'\n", &c),
               PL_ERR_INVALID,
               "c.yaml:4:3: key 'security': coordinator_secret_key given without "
               "coordinator_public_key");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "security:\n  coordinator_public_key: abc\n", &c),
               PL_ERR_INVALID,
               "c.yaml:4:27: key 'security.coordinator_public_key': expected a Z85 key of 40 "
               "characters, got 3");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "security:\n  coordinator_public_key: "
                                      "\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf~\"\n",
                         &c),
               PL_ERR_INVALID,
               "c.yaml:4:27: key 'security.coordinator_public_key': character '~' is not in the "
               "Z85 alphabet");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - name: 'no de'\n", &c), PL_ERR_INVALID,
               "c.yaml:4:11: key 'nodes[0].name': 'no de' must match [A-Za-z0-9_.-]+");
    EXPECT_ERR(s_cluster(CLUSTER_HEAD "nodes:\n  - {name: a, address: 'a b'}\n", &c),
               PL_ERR_INVALID,
               "c.yaml:4:24: key 'nodes[0].address': 'a b' is not a host name or IP address");
    EXPECT_ERR(s_node(NODE_HEAD "devices: [cpu, gpu]\n", &n), PL_ERR_INVALID,
               "n.yaml:3:16: key 'devices[1]': expected one of cpu, cuda, hip");
    EXPECT_ERR(s_node(NODE_HEAD "devices: [cpu, hip, cpu]\n", &n), PL_ERR_INVALID,
               "n.yaml:3:21: key 'devices[2]': duplicate value 'cpu'");
    EXPECT_ERR(s_node(NODE_HEAD "log_level: verbose\n", &n), PL_ERR_INVALID,
               "n.yaml:3:12: key 'log_level': expected one of error, warn, info, debug");
    EXPECT_ERR(s_job(JOB_HEAD "placement:\n  nodes: [a, 'b/c']\n", &j), PL_ERR_INVALID,
               "j.yaml:4:14: key 'placement.nodes[1]': 'b/c' must match [A-Za-z0-9_.-]+");
}

Test(config, error_too_many)
{
    char yaml[4096];
    size_t n;
    pl_cfg_cluster_t c;
    pl_cfg_node_t nd;
    pl_cfg_job_t j;

    EXPECT_ERR(
        s_cluster(CLUSTER_HEAD "nodes:\n  - {name: a, labels: [a, b, c, d, e, f, g, h, i]}\n", &c),
        PL_ERR_RANGE, "c.yaml:4:48: key 'nodes[0].labels': more than 8 entries");
    EXPECT_ERR(s_node(NODE_HEAD "devices: [cpu, cuda, hip, cpu, cuda]\n", &nd), PL_ERR_RANGE,
               "n.yaml:3:32: key 'devices': more than 4 entries");
    n = (size_t)snprintf(yaml, sizeof(yaml), CLUSTER_HEAD "nodes:\n");
    for (int i = 0; i <= PL_CFG_MAX_NODES; i++)
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "  - name: n%d\n", i);
    EXPECT_ERR(s_cluster(yaml, &c), PL_ERR_RANGE, "c.yaml:68:5: key 'nodes': more than 64 entries");
    n = (size_t)snprintf(yaml, sizeof(yaml), JOB_HEAD "placement:\n  nodes:\n");
    for (int i = 0; i <= PL_CFG_MAX_NODES; i++)
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "    - n%d\n", i);
    EXPECT_ERR(s_job(yaml, &j), PL_ERR_RANGE,
               "j.yaml:69:7: key 'placement.nodes': more than 64 entries");
}

/* "HEAD" "KEY: " + `len` times 'x' + "\n" "TAIL": a document with one long plain value. */
static char *s_with_long(const char *head, const char *key, size_t len, const char *tail)
{
    size_t cap = strlen(head) + strlen(key) + len + strlen(tail) + 16;
    char *yaml = malloc(cap);
    size_t n = (size_t)snprintf(yaml, cap, "%s%s: ", head, key);
    memset(yaml + n, 'x', len);
    snprintf(yaml + n + len, cap - n - len, "\n%s", tail);
    return yaml;
}

Test(config, string_limits)
{
    pl_cfg_cluster_t c;
    pl_cfg_job_t j;
    pl_cfg_node_t n;
    char *yaml;

    yaml = s_with_long(CLUSTER_HEAD "nodes:\n  - ", "name", PL_CFG_NAME_MAX, "");
    cr_assert_eq(s_cluster(yaml, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(strlen(c.nodes[0].name), PL_CFG_NAME_MAX);
    free(yaml);
    yaml = s_with_long(CLUSTER_HEAD "nodes:\n  - ", "name", PL_CFG_NAME_MAX + 1, "");
    EXPECT_ERR(s_cluster(yaml, &c), PL_ERR_RANGE,
               "c.yaml:4:11: key 'nodes[0].name': string of 64 bytes is longer than the limit "
               "of 63");
    free(yaml);

    /* coordinator: "tcp://" + 249 x = 255 bytes fits char[256]; one more does not. */
    yaml = s_with_long("name: a\n", "coordinator", 255, "");
    memcpy(yaml + strlen("name: a\ncoordinator: "), "tcp://", 6);
    cr_assert_eq(s_node(yaml, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(strlen(n.coordinator), 255);
    free(yaml);
    yaml = s_with_long("name: a\n", "coordinator", 256, "");
    memcpy(yaml + strlen("name: a\ncoordinator: "), "tcp://", 6);
    EXPECT_ERR(s_node(yaml, &n), PL_ERR_RANGE,
               "n.yaml:2:14: key 'coordinator': string of 256 bytes is longer than the limit of "
               "255");
    free(yaml);

    yaml = s_with_long("", "model", PATH_MAX - 1, "prompts: p\n");
    cr_assert_eq(s_job(yaml, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(strlen(j.model), PATH_MAX - 1);
    /* Joined to a base directory it no longer fits: an error, never a truncated path. */
    cr_assert_eq(pl_cfg_job_parse(yaml, strlen(yaml), "j.yaml", "/base", &j), PL_ERR_INVALID);
    cr_assert_str_eq(pl_error_msg(), "j.yaml:1:8: key 'model': path is longer than 4095 bytes "
                                     "once joined to '/base'");
    free(yaml);
    yaml = s_with_long("", "model", PATH_MAX, "prompts: p\n");
    EXPECT_ERR(s_job(yaml, &j), PL_ERR_RANGE,
               "j.yaml:1:8: key 'model': string of 4096 bytes is longer than the limit of 4095");
    free(yaml);
}

Test(config, error_leaves_output_untouched)
{
    pl_cfg_cluster_t c, ref_c;
    pl_cfg_job_t j, ref_j;
    memset(&c, 0xab, sizeof(c));
    memcpy(&ref_c, &c, sizeof(c));
    /* The error comes after the coordinator and the first node were read. */
    cr_assert_neq(s_cluster(CLUSTER_HEAD "nodes:\n  - name: a\n  - name: b\n    threads: x\n", &c),
                  PL_OK);
    cr_assert_eq(memcmp(&c, &ref_c, sizeof(c)), 0);
    memset(&j, 0x5a, sizeof(j));
    memcpy(&ref_j, &j, sizeof(j));
    cr_assert_neq(s_job(JOB_HEAD "sampling: {seed: 3, top_p: 2}\n", &j), PL_OK);
    cr_assert_eq(memcmp(&j, &ref_j, sizeof(j)), 0);
}

Test(config, size_limit)
{
    size_t len = PL_CFG_MAX_BYTES + 1;
    char *big = malloc(len);
    pl_cfg_job_t j;
    memset(big, '#', len);
    EXPECT_ERR(pl_cfg_job_parse(big, len, "big.yaml", NULL, &j), PL_ERR_RANGE,
               "big.yaml: 1048577 bytes, more than the limit of 1048576");
    free(big);
}
