/* The node daemon: device discovery, registration, heartbeats, and the executors of its stages. */
#include "daemon/node.h"

#include "backends/backend.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "pipeline/exec.h"
#include "transport/ctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_MAX_DEVS 16
#define S_MAX_EXECS 16
#define S_HELLO_RETRY_S 2.0
#define S_RELEASE_TIMEOUT_S 60.0

typedef struct {
    pl_be_device_t *dev;
    pl_be_device_info_t info;
    pl_be_calib_t calib;
    char id[32];
} s_dev_t;

typedef struct {
    const pl_cfg_node_t *cfg;
    void *zctx, *dealer;
    s_dev_t devs[S_MAX_DEVS];
    int n_devs;
    json_t *unavailable;
    pl_exec_t *execs[S_MAX_EXECS];
    double done_at[S_MAX_EXECS]; /* when the executor reported DONE; 0 while it runs */
    int n_execs;
    bool registered;
    double next_hb, next_hello;
} s_node_t;

static bool s_backend_wanted(const pl_cfg_node_t *cfg, const char *name)
{
    if (cfg->n_devices == 0)
        return true;
    for (int i = 0; i < cfg->n_devices; i++)
        if (strcmp(cfg->devices[i], name) == 0)
            return true;
    return false;
}

static pl_status_t s_discover(s_node_t *n)
{
    pl_be_entry_t be[8];
    int nb = pl_be_registry_list(be, 8);
    n->unavailable = json_array();
    for (int b = 0; b < nb; b++) {
        if (!s_backend_wanted(n->cfg, be[b].name))
            continue;
        pl_be_device_info_t infos[S_MAX_DEVS];
        int nd = 0;
        if (!be[b].backend) {
            pl_log_info("backend %s: unavailable: %s", be[b].name, be[b].why);
            json_array_append_new(n->unavailable,
                                  json_pack("{s:s, s:s}", "backend", be[b].name, "why", be[b].why));
            continue;
        }
        pl_status_t st = pl_be_probe(be[b].backend, infos, S_MAX_DEVS, &nd);
        if (st) {
            pl_log_info("backend %s: no devices: %s", be[b].name, pl_error_msg());
            json_array_append_new(n->unavailable, json_pack("{s:s, s:s}", "backend", be[b].name,
                                                            "why", pl_error_msg()));
            continue;
        }
        for (int d = 0; d < nd && n->n_devs < S_MAX_DEVS; d++) {
            s_dev_t *dv = &n->devs[n->n_devs];
            dv->info = infos[d];
            if ((st = pl_be_device_open(be[b].backend, infos[d].index, n->cfg->threads,
                                        &dv->dev))) {
                pl_log_warn("device %s:%d: cannot open: %s", be[b].name, d, pl_error_msg());
                continue;
            }
            /* testing (node file `slowdown`): the device really runs that many times slower,
             * and calibrates accordingly */
            if (n->cfg->slowdown > 1.0f && !strcmp(infos[d].backend, "cpu")) {
                pl_be_device_set_slowdown(dv->dev, n->cfg->slowdown);
                pl_log_warn("device %s:%d: slowed down %.2fx for testing", be[b].name, d,
                            (double)n->cfg->slowdown);
            }
            double t0 = pl_now();
            if ((st = pl_be_device_calibrate(dv->dev, &dv->calib))) {
                pl_log_warn("device %s:%d: calibration failed: %s", be[b].name, d,
                            pl_error_msg());
                pl_be_device_close(&dv->dev);
                continue;
            }
            uint64_t reserve = (uint64_t)n->cfg->memory_reserve_mb << 20;
            dv->info.mem_bytes = dv->info.mem_bytes > reserve ? dv->info.mem_bytes - reserve : 0;
            char id[sizeof(dv->id)];
            snprintf(id, sizeof(id), "%.15s:%d", infos[d].backend, infos[d].index);
            memcpy(dv->id, id, sizeof(id));
            pl_log_info("device %s: %s, %d cores, %.1f GiB usable, %.1f GFLOP/s, %.1f GB/s "
                        "(calibrated in %.2f s)",
                        dv->id, dv->info.name, dv->info.cores, dv->info.mem_bytes / 1073741824.0,
                        dv->calib.gflops, dv->calib.mem_gbps, pl_now() - t0);
            n->n_devs++;
        }
    }
    if (n->n_devs == 0)
        return pl_error(PL_ERR_NO_DEVICE, "no usable device on this node");
    return PL_OK;
}

static json_t *s_health(const s_node_t *n)
{
    double load[3] = {0};
    long rss_kb = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        long pages, res;
        if (fscanf(f, "%ld %ld", &pages, &res) == 2)
            rss_kb = res * (sysconf(_SC_PAGESIZE) / 1024);
        fclose(f);
    }
    getloadavg(load, 3);
    json_t *stages = json_array();
    for (int i = 0; i < n->n_execs; i++)
        json_array_append_new(stages,
                              json_pack("{s:i, s:i, s:I}", "job", pl_exec_job(n->execs[i]), "stage",
                                        pl_exec_stage(n->execs[i]), "generated",
                                        (json_int_t)pl_exec_generated(n->execs[i])));
    return json_pack("{s:s, s:o, s:I, s:f}", "node", n->cfg->name, "stages", stages, "rss_kb",
                     (json_int_t)rss_kb, "load1", load[0]);
}

static void s_send(s_node_t *n, pl_msg_type_t type, json_t *body)
{
    pl_status_t st = pl_ctl_send(n->dealer, NULL, 0, type, body);
    if (st && st != PL_ERR_BUSY)
        pl_log_warn("coordinator: cannot send %s: %s", pl_msg_name(type), pl_error_msg());
    json_decref(body);
}

static void s_hello(s_node_t *n)
{
    char host[256] = "";
    json_t *devs = json_array();
    gethostname(host, sizeof(host) - 1);
    for (int i = 0; i < n->n_devs; i++) {
        const s_dev_t *d = &n->devs[i];
        json_array_append_new(
            devs, json_pack("{s:s, s:s, s:s, s:i, s:I, s:s, s:f, s:f}", "id", d->id, "backend",
                            d->info.backend, "name", d->info.name, "cores", d->info.cores,
                            "mem_bytes", (json_int_t)d->info.mem_bytes, "isa", d->info.isa,
                            "gflops", d->calib.gflops, "mem_gbps", d->calib.mem_gbps));
    }
    s_send(n, PL_MSG_HELLO,
           json_pack("{s:i, s:s, s:s, s:i, s:o, s:O, s:o}", "proto", PL_PROTO_VERSION, "node",
                     n->cfg->name, "host", host, "pid", (int)getpid(), "devices", devs,
                     "unavailable", n->unavailable, "health", s_health(n)));
    n->next_hello = pl_now() + S_HELLO_RETRY_S;
}

static s_dev_t *s_find_dev(s_node_t *n, const char *id)
{
    for (int i = 0; i < n->n_devs; i++)
        if (strcmp(n->devs[i].id, id) == 0)
            return &n->devs[i];
    return NULL;
}

static void s_fail(s_node_t *n, int64_t job, int64_t stage, const char *why)
{
    pl_log_error("job %lld stage %lld: %s", (long long)job, (long long)stage, why);
    s_send(n, PL_MSG_FAIL, json_pack("{s:I, s:I, s:s}", "job", (json_int_t)job, "stage",
                                     (json_int_t)stage, "error", why));
}

static void s_on_assign(s_node_t *n, json_t *b)
{
    int64_t job = -1, stage = -1, n_stages, first, last, max_ctx, max_tokens;
    char model[PATH_MAX], dev_id[32];
    json_t *gen = json_object_get(b, "gen");
    pl_status_t st;
    if ((st = pl_json_int(b, "job", 1, UINT32_MAX, &job)) ||
        (st = pl_json_int(b, "stage", 0, 63, &stage)) ||
        (st = pl_json_int(b, "n_stages", stage + 1, 64, &n_stages)) ||
        (st = pl_json_int(b, "first", 0, 4096, &first)) ||
        (st = pl_json_int(b, "last", first, 4096, &last)) ||
        (st = pl_json_int(b, "max_ctx", 1, 1 << 24, &max_ctx)) ||
        (st = pl_json_int(b, "max_tokens", 1, 1 << 24, &max_tokens)) ||
        (st = pl_json_str(b, "model", model, sizeof(model) - 1)) ||
        (st = pl_json_str(b, "device", dev_id, sizeof(dev_id) - 1))) {
        s_fail(n, job, stage, pl_error_msg());
        return;
    }
    s_dev_t *d = s_find_dev(n, dev_id);
    if (!d || !json_is_object(gen) || n->n_execs == S_MAX_EXECS) {
        s_fail(n, job, stage, !d ? "assignment names an unknown device"
                              : !json_is_object(gen) ? "assignment without a 'gen' object"
                                                     : "too many stages on this node");
        return;
    }
    pl_exec_params_t p = {.job_id = (uint32_t)job, .stage = (int)stage,
                          .n_stages = (int)n_stages, .first_layer = (int)first,
                          .last_layer = (int)last, .job = json_deep_copy(gen),
                          .max_ctx = (int)max_ctx, .max_tokens = (int)max_tokens,
                          .dev = d->dev, .threads = n->cfg->threads};
    snprintf(p.model_dir, sizeof(p.model_dir), "%s", model);
    pl_exec_t *x;
    if ((st = pl_exec_start(n->zctx, &p, &x))) {
        s_fail(n, job, stage, pl_error_msg());
        return;
    }
    n->done_at[n->n_execs] = 0;
    n->execs[n->n_execs++] = x;
    pl_log_info("job %lld: stage %lld/%lld, layers %lld-%lld on %s", (long long)job,
                (long long)stage, (long long)n_stages, (long long)first, (long long)last, dev_id);
}

static int s_find_exec(s_node_t *n, const json_t *b)
{
    int64_t job = -1, stage = -1;
    if (pl_json_int(b, "job", 0, UINT32_MAX, &job) ||
        pl_json_int_opt(b, "stage", -1, 63, &stage))
        return -1;
    for (int i = 0; i < n->n_execs; i++)
        if (pl_exec_job(n->execs[i]) == (uint32_t)job &&
            (stage < 0 || pl_exec_stage(n->execs[i]) == stage))
            return i;
    return -1;
}

static void s_drop_exec(s_node_t *n, int i)
{
    pl_exec_destroy(&n->execs[i]);
    n->n_execs--;
    n->execs[i] = n->execs[n->n_execs];
    n->done_at[i] = n->done_at[n->n_execs];
}

/* Returns false when the daemon should stop. */
static bool s_on_coord(s_node_t *n)
{
    pl_ctl_msg_t m;
    pl_status_t st = pl_ctl_recv(n->dealer, false, ZMQ_DONTWAIT, &m);
    if (st == PL_ERR_BUSY)
        return true;
    if (st) {
        pl_log_warn("coordinator: %s", pl_error_msg());
        return true;
    }
    switch (m.type) {
    case PL_MSG_WELCOME:
        if (!n->registered)
            pl_log_info("registered with the coordinator");
        n->registered = true;
        break;
    case PL_MSG_ASSIGN:
        s_on_assign(n, m.body);
        break;
    case PL_MSG_START: {
        int i = s_find_exec(n, m.body);
        if (i < 0 || pl_ctl_send(pl_exec_socket(n->execs[i]), NULL, 0, PL_MSG_START, m.body))
            pl_log_warn("START for a stage this node does not run");
        break;
    }
    case PL_MSG_CANCEL: { /* also the release of a finished job's stages */
        int i;
        while ((i = s_find_exec(n, m.body)) >= 0) {
            if (!n->done_at[i])
                pl_log_info("job %u stage %d: canceled by the coordinator",
                            pl_exec_job(n->execs[i]), pl_exec_stage(n->execs[i]));
            s_drop_exec(n, i);
        }
        break;
    }
    case PL_MSG_ERROR: {
        const char *e = NULL;
        pl_json_str_opt(m.body, "error", 4096, &e);
        pl_log_warn("coordinator says: %s", e ? e : "(no reason)");
        if (e && strstr(e, "not registered")) {
            n->registered = false;
            s_hello(n);
        }
        break;
    }
    case PL_MSG_SHUTDOWN:
        pl_log_info("shutdown requested by the coordinator");
        pl_ctl_msg_clear(&m);
        return false;
    default:
        pl_log_warn("coordinator: unexpected %s", pl_msg_name(m.type));
    }
    pl_ctl_msg_clear(&m);
    return true;
}

static void s_on_exec(s_node_t *n, int i)
{
    pl_ctl_msg_t m;
    if (pl_ctl_recv(pl_exec_socket(n->execs[i]), false, ZMQ_DONTWAIT, &m))
        return;
    json_object_set_new(m.body, "node", json_string(n->cfg->name));
    pl_status_t st = pl_ctl_send(n->dealer, NULL, 0, m.type, m.body);
    if (st)
        pl_log_warn("coordinator: cannot forward %s: %s", pl_msg_name(m.type), pl_error_msg());
    if (m.type == PL_MSG_FAIL)
        s_drop_exec(n, i);
    else if (m.type == PL_MSG_DONE) /* its endpoints stay up until the job is released */
        n->done_at[i] = pl_now();
    pl_ctl_msg_clear(&m);
}

pl_status_t pl_node_run(const pl_cfg_node_t *cfg, volatile sig_atomic_t *stop)
{
    s_node_t n = {.cfg = cfg};
    pl_status_t st;

    if ((st = s_discover(&n)))
        goto out;
    n.zctx = zmq_ctx_new();
    n.dealer = zmq_socket(n.zctx, ZMQ_DEALER);
    pl_ctl_socket_setup(n.dealer);
    zmq_setsockopt(n.dealer, ZMQ_ROUTING_ID, cfg->name, strlen(cfg->name));
    if (cfg->coordinator_key[0] && (st = pl_ctl_curve_client(n.dealer, cfg->coordinator_key)))
        goto out;
    if (zmq_connect(n.dealer, cfg->coordinator) != 0) {
        st = pl_error(PL_ERR_TRANSPORT, "coordinator %s: %s", cfg->coordinator,
                      zmq_strerror(zmq_errno()));
        goto out;
    }
    pl_log_info("node %s: connecting to %s", cfg->name, cfg->coordinator);
    s_hello(&n);
    n.next_hb = pl_now() + cfg->heartbeat_ms / 1000.0;
    while (!*stop) {
        zmq_pollitem_t items[1 + S_MAX_EXECS];
        int ni = 0;
        items[ni++] = (zmq_pollitem_t){.socket = n.dealer, .events = ZMQ_POLLIN};
        for (int i = 0; i < n.n_execs; i++)
            items[ni++] =
                (zmq_pollitem_t){.socket = pl_exec_socket(n.execs[i]), .events = ZMQ_POLLIN};
        double now = pl_now(), due = n.next_hb;
        if (!n.registered && n.next_hello < due)
            due = n.next_hello;
        long wait_ms = due > now ? (long)((due - now) * 1000) + 1 : 0;
        int rc = zmq_poll(items, ni, wait_ms);
        if (rc < 0 && zmq_errno() != EINTR) {
            st = pl_error(PL_ERR_TRANSPORT, "poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (rc > 0) {
            if ((items[0].revents & ZMQ_POLLIN) && !s_on_coord(&n))
                break;
            /* walk backwards: a finished executor is swapped with the last one */
            for (int i = ni - 1; i >= 1; i--)
                if ((items[i].revents & ZMQ_POLLIN) && i - 1 < n.n_execs &&
                    items[i].socket == pl_exec_socket(n.execs[i - 1]))
                    s_on_exec(&n, i - 1);
        }
        now = pl_now();
        if (now >= n.next_hb) {
            s_send(&n, PL_MSG_HEARTBEAT, s_health(&n));
            n.next_hb = now + cfg->heartbeat_ms / 1000.0;
        }
        if (!n.registered && now >= n.next_hello)
            s_hello(&n);
        for (int i = n.n_execs - 1; i >= 0; i--) /* no release came (coordinator gone) */
            if (n.done_at[i] && now - n.done_at[i] > S_RELEASE_TIMEOUT_S)
                s_drop_exec(&n, i);
    }
out:
    while (n.n_execs > 0)
        s_drop_exec(&n, n.n_execs - 1);
    for (int i = 0; i < n.n_devs; i++)
        pl_be_device_close(&n.devs[i].dev);
    json_decref(n.unavailable);
    if (n.dealer)
        zmq_close(n.dealer);
    if (n.zctx)
        zmq_ctx_term(n.zctx);
    return st;
}
