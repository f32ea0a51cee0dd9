/* The UCX transports a node's UCX context has (its resources as "transport/device"), for the
 * node's health: what the data plane could use, after UCX_TLS and UCX_NET_DEVICES. */
#include "transport/msg.h"
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(PL_MSG_UCX_RES_LEN == PL_UCX_RES_LEN, "a UCX resource name fits the health message");

int pl_ucx_resources_parse(const char *text, char (*out)[PL_UCX_RES_LEN], int max)
{
    int n = 0;
    for (const char *line = text; line && *line && n < max;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *res = memmem(line, len, "resource ", 9);
        const char *dash = res ? memmem(res, len - (size_t)(res - line), "-- ", 3) : NULL;
        if (dash) {
            const char *name = dash + 3, *stop = line + len;
            while (stop > name && isspace((unsigned char)stop[-1]))
                stop--;
            size_t k = (size_t)(stop - name);
            bool dup = false;
            for (int i = 0; i < n && !dup; i++)
                dup = strlen(out[i]) == k && memcmp(out[i], name, k) == 0;
            if (!dup && pl_msg_ucx_res_name_ok(name, k)) {
                memcpy(out[n], name, k);
                out[n][k] = '\0';
                n++;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

pl_status_t pl_ucx_resources(char (*out)[PL_UCX_RES_LEN], int max, int *n_p)
{
    ucp_context_h ctx;
    char *text = NULL;
    size_t len = 0;
    pl_status_t st = pl_ucx_context_new(PL_UCX_PEER_TIMEOUT_MS, &ctx);
    if (st)
        return st;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        ucp_cleanup(ctx);
        return pl_error(PL_ERR_NOMEM, "ucx resources: out of memory");
    }
    ucp_context_print_info(ctx, f);
    fclose(f);
    ucp_cleanup(ctx);
    if (!text)
        return pl_error(PL_ERR_NOMEM, "ucx resources: out of memory");
    *n_p = pl_ucx_resources_parse(text, out, max);
    free(text);
    return PL_OK;
}
