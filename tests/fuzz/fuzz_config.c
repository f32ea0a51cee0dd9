/* libFuzzer harness for the YAML config loaders (built by tests/fuzz/CMakeLists.txt; tools/fuzz.sh
 * runs it). Build one binary per parser, PL_FUZZ_WHICH = 0 cluster, 1 node, 2 job, 3 pipectl,
 * 4 training job, from the repository root:
 *
 *   for w in 0 1 2 3 4; do
 *     clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -DPL_FUZZ_WHICH=$w -I. \
 *       tests/fuzz/fuzz_config.c common/config*.c common/yaml_schema.c \
 *       common/yaml_tree.c common/status.c common/util.c common/log.c -lyaml -lpthread -lm \
 *       -o /tmp/fuzz_config_$w
 *   done
 *   mkdir -p /tmp/corpus && cp etc/cluster.yaml etc/pipeld.yaml etc/job.yaml \
 *     etc/train-tiny.yaml /tmp/corpus/
 *   /tmp/fuzz_config_2 -max_total_time=60 -max_len=4096 /tmp/corpus
 */
#include "common/config.h"
#include "common/config_train.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef PL_FUZZ_WHICH
#define PL_FUZZ_WHICH 0
#endif

static void s_check_str(const char *s, size_t size)
{
    if (!memchr(s, '\0', size))
        abort(); /* a string field must always be terminated inside its buffer */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that any read past `size` is an ASan report. */
    char *text = malloc(size ? size : 1);
    pl_status_t st;

    if (!text)
        return 0;
    memcpy(text, data, size);
#if PL_FUZZ_WHICH == 0
    static pl_cfg_cluster_t c;
    st = pl_cfg_cluster_parse(text, size, "f", &c);
    if (st == PL_OK) {
        if (c.n_nodes < 0 || c.n_nodes > PL_CFG_MAX_NODES || c.heartbeat_ms >= c.dead_after_ms)
            abort();
        s_check_str(c.endpoint, sizeof(c.endpoint));
        for (int i = 0; i < c.n_nodes; i++) {
            if (c.nodes[i].n_labels < 0 || c.nodes[i].n_labels > PL_CFG_MAX_LABELS ||
                !c.nodes[i].name[0])
                abort();
            s_check_str(c.nodes[i].name, sizeof(c.nodes[i].name));
            s_check_str(c.nodes[i].address, sizeof(c.nodes[i].address));
            for (int k = 0; k < i; k++)
                if (strcmp(c.nodes[i].name, c.nodes[k].name) == 0)
                    abort();
        }
        /* the allow-list: a known role, exactly one key form, '*' only for nodes */
        if (c.n_clients < 0 || c.n_clients > PL_CFG_MAX_CLIENTS || c.n_model_dirs < 0 ||
            c.n_model_dirs > PL_CFG_MAX_MODEL_DIRS || (c.secret_key[0] && c.secret_key_file[0]))
            abort();
        for (int i = 0; i < c.n_clients; i++) {
            const pl_cfg_client_t *k = &c.clients[i];
            s_check_str(k->name, sizeof(k->name));
            s_check_str(k->role, sizeof(k->role));
            s_check_str(k->public_key_file, sizeof(k->public_key_file));
            if (strcmp(k->role, "node") && strcmp(k->role, "user") && strcmp(k->role, "admin"))
                abort();
            if (!k->public_key[0] == !k->public_key_file[0] ||
                (k->public_key[0] && strlen(k->public_key) != 40))
                abort();
            if (!strcmp(k->name, "*") && strcmp(k->role, "node"))
                abort();
        }
        for (int i = 0; i < c.n_model_dirs; i++)
            s_check_str(c.model_dirs[i], sizeof(c.model_dirs[i]));
    }
#elif PL_FUZZ_WHICH == 1
    pl_cfg_node_t n;
    st = pl_cfg_node_parse(text, size, "f", &n);
    if (st == PL_OK) {
        if (n.n_devices < 0 || n.n_devices > 4 || !n.name[0] || !n.coordinator[0])
            abort();
        s_check_str(n.log_level, sizeof(n.log_level));
    }
#elif PL_FUZZ_WHICH == 3
    pl_cfg_pipectl_t u;
    st = pl_cfg_pipectl_parse(text, size, "f", &u);
    if (st == PL_OK) {
        if (!(u.timeout_s > 0 && u.timeout_s <= 3600))
            abort();
        s_check_str(u.coordinator, sizeof(u.coordinator));
        s_check_str(u.key_file, sizeof(u.key_file));
        bool known = false;
        for (int i = 0; pl_cfg_output_names[i]; i++)
            known = known || !strcmp(u.output, pl_cfg_output_names[i]);
        if (!known)
            abort();
    }
#elif PL_FUZZ_WHICH == 4
    static pl_cfg_train_t t;
    st = pl_cfg_train_parse(text, size, "f", "/base", &t);
    if (st == PL_OK) {
        /* the cross-field rules hold on everything accepted */
        if (t.model[0] != '/' || !t.data_tokens[0] == !t.data_text[0] || t.micro_batch != 1 ||
            t.global_batch < 1 || t.global_batch > PL_CFG_TRAIN_MAX_BATCH || t.steps < 1 ||
            (t.opt.warmup_steps > 0 && t.opt.warmup_steps >= t.steps) ||
            t.opt.min_lr > t.opt.lr || !(t.opt.lr > 0) ||
            (t.checkpoint_every > 0 && !t.checkpoint_dir[0]) || t.checkpoint_every > t.steps ||
            t.replicas < 1 || (t.stages ? t.stages : 1) * t.replicas > PL_CFG_MAX_NODES ||
            t.n_nodes < 0 || t.n_nodes > PL_CFG_MAX_NODES)
            abort();
        s_check_str(t.model, sizeof(t.model));
        s_check_str(t.data_tokens, sizeof(t.data_tokens));
        s_check_str(t.data_text, sizeof(t.data_text));
        s_check_str(t.checkpoint_dir, sizeof(t.checkpoint_dir));
        s_check_str(t.resume_from, sizeof(t.resume_from));
        s_check_str(t.schedule, sizeof(t.schedule));
    }
#else
    static pl_cfg_job_t j;
    st = pl_cfg_job_parse(text, size, "f", "/base", &j);
    if (st == PL_OK) {
        if (j.gen.max_new_tokens < 1 || j.gen.max_new_tokens > 65536 ||
            j.gen.min_new_tokens < 0 || j.gen.min_new_tokens > 65536 ||
            !(j.gen.top_p > 0 && j.gen.top_p <= 1) ||
            j.n_nodes < 0 || j.n_nodes > PL_CFG_MAX_NODES || j.model[0] != '/')
            abort();
        s_check_str(j.model, sizeof(j.model));
        s_check_str(j.prompts, sizeof(j.prompts));
    }
#endif
    if (st != PL_OK && strncmp(pl_error_msg(), "f:", 2) != 0)
        abort(); /* every error names its origin */
    free(text);
    return 0;
}
