/* The embedded default cluster: what pipecoord uses when no cluster file is given, and what the
 * README's run command and the integration tests start (one coordinator, three local nodes). */
#include "common/config.h"

/* Everything on loopback; each node one CPU thread so that three daemons share a small machine
 * without oversubscribing it. Parsed by the same schema as a user's file (tests check it). */
const char pl_cfg_default_cluster_yaml[] =
    "# pipeld default cluster: a coordinator and three nodes on this machine.\n"
    "coordinator:\n"
    "  endpoint: tcp://127.0.0.1:5555\n"
    "  heartbeat_ms: 500\n"
    "  dead_after_ms: 3000\n"
    "nodes:\n"
    "  - name: node0\n"
    "    address: 127.0.0.1\n"
    "    threads: 1\n"
    "  - name: node1\n"
    "    address: 127.0.0.1\n"
    "    threads: 1\n"
    "  - name: node2\n"
    "    address: 127.0.0.1\n"
    "    threads: 1\n";
