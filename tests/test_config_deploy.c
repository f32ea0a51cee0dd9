/* The deployment file (common/config_deploy.c): every key, the defaults, the ranges, the
 * required keys, unknown keys, relative paths, and the example in etc/. */
#include "common/config.h"

#include <criterion/criterion.h>
#include <string.h>

static pl_status_t s_parse(const char *yaml, pl_cfg_deploy_t *d)
{
    return pl_cfg_deploy_parse(yaml, strlen(yaml), "d.yaml", "/base", d);
}

Test(config_deploy, every_key)
{
    pl_cfg_deploy_t d;
    cr_assert_eq(s_parse("name: chat-1\nmodel: /m/tiny\nstages: 3\nplanner: optimal\n"
                         "placement:\n  nodes: [a, b]\nmicrobatches: 4\nkv_slots: 32\n"
                         "max_queue: 0\nmax_tokens: 100\nstep_tokens: 64\nwire_dtype: bf16\n",
                         &d),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(d.name, "chat-1");
    cr_assert_str_eq(d.model, "/m/tiny");
    cr_assert_eq(d.stages, 3);
    cr_assert_str_eq(d.planner, "optimal");
    cr_assert_eq(d.n_nodes, 2);
    cr_assert_str_eq(d.nodes[1], "b");
    cr_assert_eq(d.microbatches, 4);
    cr_assert_eq(d.kv_slots, 32);
    cr_assert_eq(d.max_queue, 0);
    cr_assert_eq(d.max_tokens, 100);
    cr_assert_eq(d.step_tokens, 64);
    cr_assert_str_eq(d.wire_dtype, "bf16");
}

Test(config_deploy, defaults_and_relative_model)
{
    pl_cfg_deploy_t d;
    cr_assert_eq(s_parse("name: t\nmodel: models/tiny\n", &d), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(d.model, "/base/models/tiny");
    cr_assert_eq(d.stages, 0);
    cr_assert_str_eq(d.planner, "auto");
    cr_assert_eq(d.n_nodes, 0);
    cr_assert_eq(d.microbatches, 0);
    cr_assert_eq(d.kv_slots, 16);
    cr_assert_eq(d.max_queue, 64);
    cr_assert_eq(d.max_tokens, 512);
    cr_assert_eq(d.step_tokens, 256);
    cr_assert_str_eq(d.wire_dtype, "f32");
}

/* Each bad file is refused with an error naming the file, the line and the key; the output is
 * left as it was. */
Test(config_deploy, errors_name_the_key)
{
    static const struct {
        const char *yaml, *want;
    } bad[] = {
        {"model: /m\n", "name"},
        {"name: t\n", "model"},
        {"name: 'a b'\nmodel: /m\n", "name"},
        {"name: t\nmodel: /m\nkv_slots: 0\n", "kv_slots"},
        {"name: t\nmodel: /m\nkv_slots: 5000\n", "kv_slots"},
        {"name: t\nmodel: /m\nmax_queue: -1\n", "max_queue"},
        {"name: t\nmodel: /m\nmax_tokens: 0\n", "max_tokens"},
        {"name: t\nmodel: /m\nstep_tokens: 0\n", "step_tokens"},
        {"name: t\nmodel: /m\nstep_tokens: x\n", "step_tokens"},
        {"name: t\nmodel: /m\nplanner: best\n", "planner"},
        {"name: t\nmodel: /m\nwire_dtype: f8\n", "wire_dtype"},
        {"name: t\nmodel: /m\nprompts: p.jsonl\n", "prompts"},
        {"name: t\nmodel: /m\nplacement:\n  nodes: [a, a]\n", "nodes"},
        {"name: t\nmodel: /m\nname: u\n", "name"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pl_cfg_deploy_t d;
        memset(&d, 0x5a, sizeof(d));
        pl_status_t st = s_parse(bad[i].yaml, &d);
        cr_assert_neq(st, PL_OK, "accepted: %s", bad[i].yaml);
        cr_assert(strstr(pl_error_msg(), "d.yaml:"), "%s", pl_error_msg());
        cr_assert(strstr(pl_error_msg(), bad[i].want), "%s: %s", bad[i].yaml, pl_error_msg());
        cr_assert_eq(((unsigned char *)&d)[0], 0x5a, "output changed on error");
    }
}

Test(config_deploy, etc_example_parses)
{
    pl_cfg_deploy_t d;
    cr_assert_eq(pl_cfg_deploy_load(PL_SOURCE_DIR "/etc/deploy-tiny.yaml", &d), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_str_eq(d.name, "tiny");
    cr_assert_str_eq(d.model, PL_SOURCE_DIR "/etc/models/tiny");
    cr_assert_eq(d.stages, 2);
    cr_assert_neq(pl_cfg_deploy_load(PL_SOURCE_DIR "/etc/no-such.yaml", &d), PL_OK);
    cr_assert(strstr(pl_error_msg(), "no-such.yaml"), "%s", pl_error_msg());
}
