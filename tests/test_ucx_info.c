/* The UCX transports a node reports in its health (transport/ucx_info.c): the parser on UCX's
 * own text, the name rule, and a live context against `ucx_info -d`'s listing, with UCX_TLS /
 * UCX_NET_DEVICES. */
#include "transport/msg.h"
#include "transport/ucx.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char s_res[64][PL_UCX_RES_LEN];

/* ucp_context_print_info's text from UCX 1.13.1 on a host with an RDMA port. */
static const char s_text[] = "#\n"
                             "# UCP context\n"
                             "#\n"
                             "#     component 0  :  self\n"
                             "#     component 1  :  tcp\n"
                             "#\n"
                             "#            md 0  :  component 0  self \n"
                             "#\n"
                             "#      resource 0  :  md 0  dev 0  flags -- self/memory0\n"
                             "#      resource 1  :  md 1  dev 1  flags -- tcp/lo\n"
                             "#      resource 2  :  md 1  dev 2  flags -- tcp/eth0\n"
                             "#      resource 3  :  md 2  dev 3  flags -- sysv/memory\n"
                             "#      resource 4  :  md 5  dev 4  flags -- rc_mlx5/mlx5_0:1\n"
                             "#      resource 5  :  md 1  dev 1  flags -- tcp/lo\n"
                             "#      resource 6  :  md 1  dev 1  flags -- bad name/x\n"
                             "#      resource 7  :  md 1  dev 1  flags -- \n"
                             "#      resource 8  :  md 1  dev 1  flags -- noslash\n"
                             "#      resource 9  :  md 3  dev 3  flags -- posix/memory";

Test(ucx_info, parse_ucx_text)
{
    int n = pl_ucx_resources_parse(s_text, s_res, 64);
    static const char *const want[] = {"self/memory0", "tcp/lo",           "tcp/eth0",
                                       "sysv/memory",  "rc_mlx5/mlx5_0:1", "posix/memory"};
    cr_assert_eq(n, 6, "repeats and malformed names are skipped: got %d", n);
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(s_res[i], want[i]);
    /* at most max */
    cr_assert_eq(pl_ucx_resources_parse(s_text, s_res, 2), 2);
    cr_assert_str_eq(s_res[1], "tcp/lo");
    cr_assert_eq(pl_ucx_resources_parse("", s_res, 8), 0);
    cr_assert_eq(pl_ucx_resources_parse("# resource 0 : no dashes\n", s_res, 8), 0);
}

Test(ucx_info, names_checked)
{
    cr_assert(pl_msg_ucx_res_name_ok("tcp/eth0", strlen("tcp/eth0")));
    cr_assert(pl_msg_ucx_res_name_ok("rc_mlx5/mlx5_0:1", strlen("rc_mlx5/mlx5_0:1")));
    cr_assert_not(pl_msg_ucx_res_name_ok(NULL, 0));
    cr_assert_not(pl_msg_ucx_res_name_ok("", strlen("")));
    cr_assert_not(pl_msg_ucx_res_name_ok("tcp", strlen("tcp")));
    cr_assert_not(pl_msg_ucx_res_name_ok("tcp/", strlen("tcp/")));
    cr_assert_not(pl_msg_ucx_res_name_ok("/lo", strlen("/lo")));
    cr_assert_not(pl_msg_ucx_res_name_ok("a/b/c", strlen("a/b/c")));
    cr_assert_not(pl_msg_ucx_res_name_ok("tcp/e\"th0", 8));
    char long_name[PL_UCX_RES_LEN + 1];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[1] = '/';
    long_name[PL_UCX_RES_LEN] = '\0';
    cr_assert_not(pl_msg_ucx_res_name_ok(long_name, strlen(long_name)), "%zu characters",
                  strlen(long_name));
    long_name[PL_UCX_RES_LEN - 1] = '\0';
    cr_assert(pl_msg_ucx_res_name_ok(long_name, strlen(long_name)), "%zu characters fit",
              strlen(long_name));
}

/* The "transport/device" pairs `ucx_info -d` lists (every resource UCX has, before UCX_TLS);
 * -1 when ucx_info is not installed. */
static int s_ucx_info(char (*out)[PL_UCX_RES_LEN], int max)
{
    FILE *p = popen("ucx_info -d 2>/dev/null", "r");
    char line[512], tl[24] = ""; /* a name of each half fits: 23 + '/' + 23 < PL_UCX_RES_LEN */
    int n = 0;
    if (!p)
        return -1;
    while (fgets(line, sizeof(line), p) && n < max) {
        char v[24];
        if (sscanf(line, "# Transport: %23s", v) == 1)
            snprintf(tl, sizeof(tl), "%s", v);
        else if (sscanf(line, "# Device: %23s", v) == 1 && tl[0])
            snprintf(out[n++], PL_UCX_RES_LEN, "%s/%s", tl, v);
    }
    return pclose(p) == 0 && n > 0 ? n : -1;
}

static bool s_has(char (*list)[PL_UCX_RES_LEN], int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], name))
            return true;
    return false;
}

static char s_ref[64][PL_UCX_RES_LEN];

Test(ucx_info, live_context_matches_ucx_info)
{
    int n_ref = s_ucx_info(s_ref, 64), n = 0;
    if (n_ref < 0)
        cr_skip_test("ucx_info is not installed (Debian's ucx-utils)");
    unsetenv("UCX_TLS");
    unsetenv("UCX_NET_DEVICES");
    cr_assert_eq(pl_ucx_resources(s_res, 64, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n, n_ref, "ours %d, ucx_info %d", n, n_ref);
    for (int i = 0; i < n; i++)
        cr_assert(s_has(s_ref, n_ref, s_res[i]), "%s is not in ucx_info's list", s_res[i]);
}

Test(ucx_info, ucx_tls_and_net_devices_honoured)
{
    int n_ref = s_ucx_info(s_ref, 64), n = 0, want = 0;
    if (n_ref < 0)
        cr_skip_test("ucx_info is not installed (Debian's ucx-utils)");
    setenv("UCX_TLS", "tcp,self", 1);
    cr_assert_eq(pl_ucx_resources(s_res, 64, &n), PL_OK, "%s", pl_error_msg());
    for (int i = 0; i < n_ref; i++)
        want += !strncmp(s_ref[i], "tcp/", 4) || !strncmp(s_ref[i], "self/", 5);
    cr_assert_eq(n, want, "UCX_TLS=tcp,self: %d of ucx_info's %d are tcp or self, ours %d", want,
                 n_ref, n);
    for (int i = 0; i < n; i++)
        cr_assert(!strncmp(s_res[i], "tcp/", 4) || !strncmp(s_res[i], "self/", 5), "%s", s_res[i]);
    if (!s_has(s_ref, n_ref, "tcp/lo"))
        return;
    setenv("UCX_NET_DEVICES", "lo", 1);
    cr_assert_eq(pl_ucx_resources(s_res, 64, &n), PL_OK, "%s", pl_error_msg());
    cr_assert(s_has(s_res, n, "tcp/lo"));
    for (int i = 0; i < n; i++)
        cr_assert(strncmp(s_res[i], "tcp/", 4) || !strcmp(s_res[i], "tcp/lo"),
                  "UCX_NET_DEVICES=lo, yet %s", s_res[i]);
}
