/* The cluster operator's verbs: `shutdown` (the coordinator and its daemons) and `keygen` (a
 * CURVE key pair for the cluster file's allow-list; no coordinator needed). */
#include "tools/pipectl/pipectl.h"

#include "transport/keys.h"

#include <stdio.h>

int pl_pipectl_shutdown(pl_pipectl_t *c, char **args, int n_args)
{
    (void)args;
    (void)n_args;
    json_t *r;
    pl_msg_t q;
    int rc;
    pl_msg_init(&q, PL_MSG_SHUTDOWN);
    if ((rc = pl_pipectl_call(c, &q, &r)))
        return rc;
    json_decref(r);
    return 0;
}

int pl_pipectl_keygen(pl_pipectl_t *c, char **args, int n_args)
{
    (void)c;
    (void)n_args;
    pl_tx_keypair_t pair;
    if (pl_tx_key_generate(args[0], &pair))
        return pl_pipectl_die("%s", pl_error_msg());
    printf("%s\n", pair.public_key); /* for the cluster file's security.clients */
    return 0;
}
