/* What the YAML loader suites share: each loader on a text (file names c.yaml, n.yaml, j.yaml),
 * the smallest valid heads, a key pair, and documents that set every key. */
#ifndef PL_TESTS_CONFIG_UTIL_H
#define PL_TESTS_CONFIG_UTIL_H

#include "common/config.h"
#include "common/status.h"
#include "status_util.h"

#include <criterion/criterion.h>
#include <string.h>

static inline pl_status_t s_cluster(const char *yaml, pl_cfg_cluster_t *out)
{
    return pl_cfg_cluster_parse(yaml, strlen(yaml), "c.yaml", out);
}

static inline pl_status_t s_node(const char *yaml, pl_cfg_node_t *out)
{
    return pl_cfg_node_parse(yaml, strlen(yaml), "n.yaml", out);
}

static inline pl_status_t s_job(const char *yaml, pl_cfg_job_t *out)
{
    return pl_cfg_job_parse(yaml, strlen(yaml), "j.yaml", NULL, out);
}

/* The loaders' refusals: status and exact message. */
#define EXPECT_ERR(call, want_st, want_msg) EXPECT_ST(call, want_st, want_msg)

#define CLUSTER_HEAD "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n"
#define JOB_HEAD "model: m\nprompts: p.jsonl\n"
#define NODE_HEAD "name: n0\ncoordinator: tcp://127.0.0.1:5555\n"

#define PUB_KEY "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
#define SEC_KEY "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"

/* Documents that set every key: a cluster, a node and a job file. */
#define TCFG_CLUSTER_FULL                                                                          \
    "coordinator:\n"                                                                               \
    "  endpoint: tcp://10.1.2.3:7000\n"                                                            \
    "  heartbeat_ms: 250\n"                                                                        \
    "  dead_after_ms: 1000\n"                                                                      \
    "security:\n"                                                                                  \
    "  coordinator_public_key: \"" PUB_KEY "\"\n"                                                  \
    "  coordinator_secret_key: '" SEC_KEY "'\n"                                                    \
    "nodes:\n"                                                                                     \
    "  - name: a-1\n"                                                                              \
    "    address: host.example\n"                                                                  \
    "    threads: 8\n"                                                                             \
    "    max_devices: 2\n"                                                                         \
    "    labels: [cpu, fast]\n"                                                                    \
    "  - {name: b_2.x, address: \"::1\", labels: []}\n"

#define TCFG_NODE_FULL                                                                             \
    "name: gpu0\n"                                                                                 \
    "coordinator: tcp://10.0.0.1:6000\n"                                                           \
    "devices: [cuda, cpu, hip]\n"                                                                  \
    "threads: 12\n"                                                                                \
    "memory_reserve_mb: 2048\n"                                                                    \
    "heartbeat_ms: 100\n"                                                                          \
    "log_level: debug\n"

#define TCFG_JOB_FULL                                                                              \
    "model: /models/llama\n"                                                                       \
    "prompts: /data/p.jsonl\n"                                                                     \
    "max_new_tokens: 128\n"                                                                        \
    "min_new_tokens: 12\n"                                                                         \
    "sampling:\n"                                                                                  \
    "  temperature: 0.7\n"                                                                         \
    "  top_k: 40\n"                                                                                \
    "  top_p: 0.95\n"                                                                              \
    "  seed: 18446744073709551615\n"                                                               \
    "microbatches: 8\n"                                                                            \
    "prefill_chunk: 256\n"                                                                         \
    "wire_dtype: bf16\n"                                                                           \
    "stages: 4\n"                                                                                  \
    "stop_at_eos: no\n"                                                                            \
    "placement:\n"                                                                                 \
    "  nodes: [node0, node1]\n"

#endif
