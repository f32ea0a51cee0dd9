/* `pipectl plan --cluster`: what-if planning on described clusters (catalogue kinds and explicit
 * devices) from a model's config.json alone, the plans checked against the model's size worked
 * out by hand, and each bad cluster file refused with an error naming the entry. No daemon runs. */
#include "plan_cluster_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>

static void s_fini(void)
{
    if (s_passed && s_c.dir[0] && !getenv("PL_TEST_KEEP")) /* a failed test keeps its files */
        tc_sh(NULL, "rm -rf %s", s_c.dir);
}

TestSuite(plan_whatif, .fini = s_fini, .timeout = 300);

/* A Llama config.json only (no weights): what-if planning needs the shape alone. */
static void s_config(const char *dir, int hidden, int inter, int layers, int heads, int kv,
                     int vocab)
{
    char name[128];
    tc_sh(NULL, "mkdir -p %s/%s", s_c.dir, dir);
    snprintf(name, sizeof(name), "%s/config.json", dir);
    s_write(name,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
            "\"torch_dtype\": \"bfloat16\", \"hidden_size\": %d, \"intermediate_size\": %d, "
            "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
            "\"vocab_size\": %d, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-5, "
            "\"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2}\n",
            hidden, inter, layers, heads, kv, vocab);
}

/* Weights of a Llama model (plain arithmetic, independent of the planner's cost model). */
static double s_params(double h, double inter, double layers, double heads, double kv, double v)
{
    double hd = h / heads, q = heads * hd, k = kv * hd;
    return layers * (h * q + 2 * h * k + q * h + 3 * h * inter + 2 * h) + v * h + (v * h + h);
}

static double s_sum(json_t *plan, const char *key)
{
    double t = 0;
    json_t *st = json_object_get(plan, "stages");
    for (size_t i = 0; i < json_array_size(st); i++)
        t += s_num(json_array_get(st, i), key);
    return t;
}

static int s_whatif(char **out, const char *job, const char *cluster, const char *args)
{
    return tc_sh(out, "%s/pipectl %s plan %s/%s --cluster %s/%s 2>&1", tc_bin(), args, s_c.dir, job,
                 s_c.dir, cluster);
}

Test(plan_whatif, pipectl_plan_on_described_clusters)
{
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    s_config("l70", 8192, 28672, 80, 64, 8, 32000);
    s_config("l405", 16384, 53248, 126, 128, 8, 128256);
    s_config("l7", 4096, 11008, 32, 32, 8, 32000);
    s_prompts("p.jsonl", 8, 100);
    s_prompts("many.jsonl", 64, 8);
    s_write("j70.yaml", "model: l70\nprompts: p.jsonl\nmax_new_tokens: 64\nplanner: optimal\n");
    s_write("j405.yaml", "model: l405\nprompts: p.jsonl\nmax_new_tokens: 64\nplanner: optimal\n");
    s_write("j7.yaml", "model: l7\nprompts: many.jsonl\nmax_new_tokens: 2000\nplanner: optimal\n");
    const char *head = "coordinator:\n  endpoint: tcp://127.0.0.1:1\n";
    s_write("mixed.yaml",
            "%snodes:\n"
            "  - name: gpubox\n    address: 10.0.0.1\n    devices:\n"
            "      - {kind: H100 SXM}\n      - {kind: RTX 4090, count: 2}\n"
            "  - name: cpubox\n    address: 10.0.0.2\n    devices: [{kind: EPYC 9654}]\n"
            "  - name: lab\n    address: 10.0.0.3\n    devices:\n"
            "      - {name: My Accel, gflops: 50000, mem_gbps: 800, mem_gb: 32, backend: hip}\n"
            "links:\n  - {from: gpubox, to: cpubox, gbps: 12.5, latency_us: 10}\n",
            head);
    s_write("gpus.yaml", "%snodes:\n  - name: dgx\n    devices: [{kind: h100, count: 4}]\n", head);
    s_write("small.yaml", "%snodes:\n  - name: pc\n    devices: [{kind: RTX 4090, count: 2}]\n",
            head);
    s_write("tiny.yaml",
            "%snodes:\n  - name: box\n    devices:\n"
            "      - {name: Card, gflops: 100000, mem_gbps: 1000, mem_gb: 20}\n",
            head);
    s_write("typo.yaml", "%snodes:\n  - name: box\n    devices: [{kind: H900}]\n", head);

    /* a mixed cluster: the table names the catalogue devices and the explicit one */
    char *out;
    cr_assert_eq(s_whatif(&out, "j70.yaml", "mixed.yaml", ""), 0, "%s", out);
    const char *want[] = {"H100 SXM",    "RTX 4090", "My Accel",
                          "bottleneck:", "tokens/s", "even split"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_expect(strstr(out, want[i]), "'%s' not in: %s", want[i], out);
    free(out);
    cr_assert_eq(s_whatif(&out, "j70.yaml", "mixed.yaml", "-o json"), 0, "%s", out);
    json_t *r = json_loads(out, 0, NULL), *p = json_object_get(r, "plan");
    cr_assert(json_is_object(p), "%s", out);
    free(out);
    s_expect_cover(p, 80);
    cr_expect_eq(json_array_size(json_object_get(p, "stages")), 5, "every device takes a stage");
    /* a CPU takes part and keeps the weights as stored: a model described by its config alone
     * counts in its dtype (bf16) on every device */
    double w = s_params(8192, 28672, 80, 64, 8, 32000);
    cr_expect_lt(fabs(s_sum(p, "mem_weights") / (2 * w) - 1), 1e-6, "weights %.0f, want %.0f",
                 s_sum(p, "mem_weights"), 2 * w);
    cr_expect_gt(s_num(p, "decode_tok_s"), 0);
    cr_expect(s_stage_on(p, "lab"), "the explicit device has no stage");
    json_decref(r);

    /* GPUs only: the model's bf16; and the auto planner may use fewer devices */
    cr_assert_eq(s_whatif(&out, "j70.yaml", "gpus.yaml", "-o json"), 0, "%s", out);
    r = json_loads(out, 0, NULL);
    p = json_object_get(r, "plan");
    free(out);
    cr_expect_lt(fabs(s_sum(p, "mem_weights") / (2 * w) - 1), 1e-6);
    cr_expect_eq(json_array_size(json_object_get(p, "stages")), 4);
    json_decref(r);

    /* too big for the cluster: says so, with how much is missing */
    cr_expect_neq(s_whatif(&out, "j405.yaml", "small.yaml", ""), 0);
    cr_expect(strstr(out, "no feasible plan") && strstr(out, "missing"), "%s", out);
    cr_expect(!strchr(out, '\n') || strchr(out, '\n') == out + strlen(out) - 1, "%s", out);
    free(out);

    /* the weights fit but not the KV cache of every sequence: the plan comes with the note */
    cr_assert_eq(s_whatif(&out, "j7.yaml", "tiny.yaml", ""), 0, "%s", out);
    cr_expect(strstr(out, "KV cache for 64 sequences does not fit; at most") &&
                  strstr(out, "split the prompts into several jobs"),
              "%s", out);
    free(out);

    /* the shipped example plans */
    cr_expect_eq(tc_sh(&out, "%s/pipectl plan %s/j70.yaml --cluster %s/etc/whatif.yaml 2>&1",
                       tc_bin(), s_c.dir, PL_SOURCE_DIR),
                 0, "%s", out);
    cr_expect(strstr(out, "Prototype accelerator"), "%s", out);
    free(out);

    /* an unknown kind is named */
    cr_expect_neq(s_whatif(&out, "j70.yaml", "typo.yaml", ""), 0);
    cr_expect(strstr(out, "H900"), "%s", out);
    free(out);
    /* bad described clusters: each error names the entry and what is wrong */
    static const struct {
        const char *yaml, *want;
    } bad[] = {
        {"nodes:\n  - name: a\n    devices: [{kind: H100, gflops: 5}]\n",
         "bad.yaml:5:15: key 'nodes[0].devices[0]': give either 'kind' or explicit"},
        {"nodes:\n  - name: a\n    devices: [{name: X, gflops: 5, mem_gb: 1}]\n",
         "needs a catalogue 'kind', or all of gflops, mem_gbps and mem_gb"},
        {"nodes:\n  - name: a\n    devices: [{gflops: 5, mem_gbps: 1, mem_gb: 1}]\n",
         "needs a 'name'"},
        {"nodes:\n  - name: a\n    devices: [{kind: L4, count: 65}]\n",
         "key 'nodes[0].devices[0].count': value 65 out of range [1, 64]"},
        {"nodes:\n  - name: a\n    devices: [{kind: L4}]\n"
         "links: [{from: a, to: a, gbps: 1, latency_us: 1}]\n",
         "a link joins two different nodes"},
        {"nodes:\n  - name: a\n    devices: [{kind: L4}]\n"
         "links: [{from: a, to: b, gbps: 1, latency_us: 1}]\n",
         "links[0].to: no node 'b' in the cluster file"},
        {"nodes:\n  - name: a\n    devices: [{kind: L4}]\n  - name: b\n",
         "node 'b' lists no devices"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        s_write("bad.yaml", "%s%s", head, bad[i].yaml);
        cr_expect_neq(s_whatif(&out, "j70.yaml", "bad.yaml", ""), 0, "case %zu accepted", i);
        cr_expect(strstr(out, bad[i].want), "case %zu: '%s' not in: %s", i, bad[i].want, out);
        free(out);
    }
    /* the catalogue is listed */
    cr_expect_eq(tc_sh(&out, "%s/pipectl catalog", tc_bin()), 0);
    cr_expect(strstr(out, "H100 SXM") && strstr(out, "MI300X"), "%s", out);
    free(out);
    s_passed = 1;
}
