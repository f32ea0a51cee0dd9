/* pipectl's user file (common/config_pipectl.c): defaults, every key, and errors naming
 * origin:line:column with nothing half-written. */
#include "common/config.h"

#include <criterion/criterion.h>
#include <string.h>

static pl_status_t s_parse(const char *text, pl_cfg_pipectl_t *out)
{
    return pl_cfg_pipectl_parse(text, strlen(text), "pipectl.yaml", out);
}

Test(config_pipectl, defaults_and_keys)
{
    pl_cfg_pipectl_t c;
    cr_assert_eq(s_parse("{}", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.output, "table");
    cr_assert_float_eq(c.timeout_s, 10, 1e-6);
    cr_assert_str_eq(c.coordinator, "");
    cr_assert_eq(s_parse("coordinator: tcp://10.0.0.1:5555\noutput: yaml\ntimeout_s: 2.5\n"
                         "key_file: /home/u/alice.key\n",
                         &c),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.coordinator, "tcp://10.0.0.1:5555");
    cr_assert_str_eq(c.output, "yaml");
    cr_assert_float_eq(c.timeout_s, 2.5, 1e-6);
    cr_assert_str_eq(c.key_file, "/home/u/alice.key");
}

static void s_bad(const char *text, const char *where, const char *what)
{
    pl_cfg_pipectl_t c;
    memset(&c, 0x5a, sizeof(c));
    cr_assert_neq(s_parse(text, &c), PL_OK, "'%s' should fail", text);
    cr_assert(strstr(pl_error_msg(), where) && strstr(pl_error_msg(), what),
              "'%s': '%s' should say %s and %s", text, pl_error_msg(), where, what);
    cr_assert_eq(((unsigned char *)&c)[0], 0x5a, "nothing written on error");
}

Test(config_pipectl, errors_name_the_place)
{
    s_bad("output: json\ncoordinater: tcp://x:1\n", "pipectl.yaml:2:1", "coordinater");
    s_bad("output: xml\n", "pipectl.yaml:1:", "output");
    s_bad("timeout_s: 0\n", "pipectl.yaml:1:", "timeout_s");
    s_bad("timeout_s: many\n", "pipectl.yaml:1:", "timeout_s");
    s_bad("timeout_s: 1e-300\n", "pipectl.yaml:1:", "timeout_s"); /* 0 as the float it is kept in */
    s_bad("coordinator: not an endpoint\n", "pipectl.yaml:1:", "coordinator");
    s_bad("coordinator_public_key: short\n", "pipectl.yaml:1:", "coordinator_public_key");
    s_bad("- a\n", "pipectl.yaml:1:", "");
}
