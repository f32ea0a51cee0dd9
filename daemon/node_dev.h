/* pipeld's devices: discovery of the devices of the backends the node file wants (opened,
 * calibrated, memory sized by the node file) and of the backends that offer none, for HELLO. */
#ifndef PL_DAEMON_NODE_DEV_H
#define PL_DAEMON_NODE_DEV_H

#include "backends/backend.h"
#include "common/config.h"
#include "transport/msg.h"

#include <stdbool.h>

#define PL_NODE_MAX_DEVS 16

typedef struct {
    pl_be_device_t *dev;
    pl_be_device_info_t info;
    pl_be_calib_t calib;
    char id[32];
    bool failed; /* its health call failed: the node is not ready */
} pl_node_dev_t;

typedef struct {
    pl_node_dev_t devs[PL_NODE_MAX_DEVS];
    int n_devs;
    int n_unavailable;
    pl_msg_unavailable_t unavailable[PL_MSG_MAX_UNAVAILABLE];
} pl_node_devs_t;

/* Open and calibrate into n (zeroed by the caller) every device of the backends cfg wants (all
 * when it names none), as cfg's threads, slowdown and memory limits say; each backend without a
 * device is listed with why. PL_ERR_NO_DEVICE when no device is usable (the opened ones stay in
 * n: close them with pl_node_devs_close). */
pl_status_t pl_node_devs_discover(const pl_cfg_node_t *cfg, pl_node_devs_t *n);
/* Close every device of n (safe twice: each closed device is NULL). */
void pl_node_devs_close(pl_node_devs_t *n);

#endif
