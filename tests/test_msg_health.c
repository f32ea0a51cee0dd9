/* The node's health in HEARTBEAT (transport/msg_node_health.c) and the DRAIN message: round
 * trips, unknown figures left out, every bad field refused with its name. */
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <string.h>

static pl_msg_heartbeat_t s_hb;

static void s_sample(pl_msg_heartbeat_t *h)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->node, sizeof(h->node), "node0");
    pl_msg_node_health_init(&h->sys);
    snprintf(h->sys.version, sizeof(h->sys.version), "0.1.0");
    h->sys.uptime_s = 12.5;
    h->sys.load5 = 0.5;
    h->sys.mem_total_kb = 1000;
    h->sys.mem_avail_kb = 400;
    h->sys.n_devices = 2;
    h->sys.devices[0] = (pl_msg_dev_health_t){.id = "cuda:0",
                                              .mem_used = 10,
                                              .mem_total = 20,
                                              .util_pct = 55,
                                              .temp_c = 61,
                                              .power_w = 120.5,
                                              .errors = 3};
    h->sys.devices[1] = (pl_msg_dev_health_t){.id = "cpu:0",
                                              .mem_used = -1,
                                              .mem_total = -1,
                                              .util_pct = -1,
                                              .temp_c = -1,
                                              .power_w = -1,
                                              .errors = -1};
    h->sys.n_ucx = 3;
    snprintf(h->sys.ucx[0], sizeof(h->sys.ucx[0]), "sysv/memory");
    snprintf(h->sys.ucx[1], sizeof(h->sys.ucx[1]), "tcp/eth0");
    snprintf(h->sys.ucx[2], sizeof(h->sys.ucx[2]), "rc_mlx5/mlx5_0:1");
    h->n_stages = 1;
    h->stages[0] = (pl_msg_progress_t){
        .job = 3, .stage = 1, .epoch = 2, .generated = 7, .busy_s = 1.25, .seqs_done = 2};
}

Test(msg_health, heartbeat_round_trip)
{
    json_t *b;
    s_sample(&s_hb);
    cr_assert_eq(pl_msg_heartbeat_encode(&s_hb, &b), PL_OK, "%s", pl_error_msg());
    json_t *sys = json_object_get(b, "system");
    cr_assert(json_is_object(sys));
    cr_assert_null(json_object_get(sys, "load15"), "unknown figures are left out");
    cr_assert_null(json_object_get(json_array_get(json_object_get(sys, "devices"), 1), "power_w"));
    static pl_msg_heartbeat_t back;
    cr_assert_eq(pl_msg_heartbeat_decode(b, &back), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(back.sys.version, "0.1.0");
    cr_assert_float_eq(back.sys.uptime_s, 12.5, 1e-9);
    cr_assert_float_eq(back.sys.load15, -1, 0);
    cr_assert_eq(back.sys.mem_avail_kb, 400);
    cr_assert_eq(back.sys.n_devices, 2);
    cr_assert_eq(back.sys.devices[0].mem_total, 20);
    cr_assert_float_eq(back.sys.devices[0].power_w, 120.5, 1e-9);
    cr_assert_eq(back.sys.devices[0].errors, 3);
    cr_assert_eq(back.sys.devices[1].mem_used, -1);
    cr_assert_str_eq(back.sys.devices[1].id, "cpu:0");
    cr_assert_float_eq(back.stages[0].busy_s, 1.25, 1e-9);
    cr_assert_eq(back.stages[0].seqs_done, 2);
    cr_assert_eq(back.sys.n_ucx, 3);
    cr_assert_str_eq(back.sys.ucx[0], "sysv/memory");
    cr_assert_str_eq(back.sys.ucx[2], "rc_mlx5/mlx5_0:1");
    json_decref(b);
}

Test(msg_health, without_system_all_unknown)
{
    json_t *b =
        json_pack("{s:s, s:[], s:i, s:f}", "node", "n", "stages", "rss_kb", 1, "load1", 0.1);
    static pl_msg_heartbeat_t back;
    cr_assert_eq(pl_msg_heartbeat_decode(b, &back), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(back.sys.mem_total_kb, -1);
    cr_assert_str_eq(back.sys.version, "");
    cr_assert_eq(back.sys.n_devices, 0);
    cr_assert_eq(back.sys.n_ucx, 0);
    json_decref(b);
}

/* The sample's body with `path` (system.K or system.devices.0.K) set to `v`: refused, the
 * error naming `what`. */
static void s_refused(const char *key, bool in_device, json_t *v, const char *what)
{
    json_t *b;
    s_sample(&s_hb);
    cr_assert_eq(pl_msg_heartbeat_encode(&s_hb, &b), PL_OK);
    json_t *o = json_object_get(b, "system");
    if (in_device)
        o = json_array_get(json_object_get(o, "devices"), 0);
    json_object_set_new(o, key, v);
    static pl_msg_heartbeat_t back;
    back.sys.uptime_s = 99;
    cr_assert_neq(pl_msg_heartbeat_decode(b, &back), PL_OK, "%s should be refused", key);
    cr_assert(strstr(pl_error_msg(), what), "'%s' should name '%s'", pl_error_msg(), what);
    cr_assert_float_eq(back.sys.uptime_s, 99, 0, "output untouched on error");
    json_decref(b);
}

Test(msg_health, bad_fields_refused)
{
    s_refused("uptime_s", false, json_real(-1), "uptime_s");
    s_refused("version", false, json_string("0123456789012345678901234567890123456789"), "version");
    s_refused("mem_avail_kb", false, json_integer(5000), "mem_avail_kb");
    s_refused("cpu_mhz", false, json_string("fast"), "cpu_mhz");
    s_refused("devices", false, json_string("x"), "devices");
    s_refused("utilization_pct", true, json_real(101), "utilization_pct");
    s_refused("temperature_c", true, json_real(-5), "temperature_c");
    s_refused("memory_used_bytes", true, json_integer(30), "memory_used_bytes");
    s_refused("errors", true, json_integer(-2), "errors");
    s_refused("id", true, json_string(""), "id");
    s_refused("ucx_transports", false, json_string("tcp/lo"), "ucx_transports");
    s_refused("ucx_transports", false, json_pack("[i]", 3), "ucx_transports[0]");
    s_refused("ucx_transports", false, json_pack("[s]", ""), "ucx_transports[0]");
    s_refused("ucx_transports", false, json_pack("[s,s]", "tcp/lo", "tcp"), "ucx_transports[1]");
    s_refused("ucx_transports", false, json_pack("[s]", "tcp/lo/x"), "ucx_transports[0]");
    s_refused("ucx_transports", false, json_pack("[s]", "tcp/l o"), "ucx_transports[0]");
    s_refused("ucx_transports", false, json_pack("[s]", "/lo"), "ucx_transports[0]");
    s_refused("ucx_transports", false,
              json_pack("[s]", "tcp/0123456789012345678901234567890123456789012345"),
              "ucx_transports[0]");
}

Test(msg_health, too_many_ucx_transports_refused)
{
    json_t *b;
    s_sample(&s_hb);
    cr_assert_eq(pl_msg_heartbeat_encode(&s_hb, &b), PL_OK);
    json_t *tls = json_object_get(json_object_get(b, "system"), "ucx_transports");
    cr_assert_eq(json_array_size(tls), 3);
    while (json_array_size(tls) <= PL_MSG_MAX_UCX_RES)
        json_array_append_new(tls, json_string("tcp/lo"));
    static pl_msg_heartbeat_t back;
    cr_assert_neq(pl_msg_heartbeat_decode(b, &back), PL_OK);
    cr_assert(strstr(pl_error_msg(), "ucx_transports"), "%s", pl_error_msg());
    json_decref(b);
}

Test(msg_health, too_many_devices_refused)
{
    json_t *b;
    s_sample(&s_hb);
    cr_assert_eq(pl_msg_heartbeat_encode(&s_hb, &b), PL_OK);
    json_t *devs = json_object_get(json_object_get(b, "system"), "devices");
    while (json_array_size(devs) <= PL_MSG_MAX_DEVICES)
        json_array_append_new(devs, json_pack("{s:s}", "id", "cpu:9"));
    static pl_msg_heartbeat_t back;
    cr_assert_neq(pl_msg_heartbeat_decode(b, &back), PL_OK);
    cr_assert(strstr(pl_error_msg(), "devices"), "%s", pl_error_msg());
    json_decref(b);
}

Test(msg_health, drain_round_trip_and_checks)
{
    pl_msg_t m, back;
    json_t *b;
    pl_msg_init(&m, PL_MSG_DRAIN);
    snprintf(m.drain.node, sizeof(m.drain.node), "node1");
    m.drain.drain = true;
    cr_assert_eq(pl_msg_encode(&m, &b), PL_OK);
    cr_assert_eq(pl_msg_decode(PL_MSG_DRAIN, b, &back), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(back.drain.node, "node1");
    cr_assert(back.drain.drain);
    json_object_set_new(b, "drain", json_integer(1));
    cr_assert_eq(pl_msg_decode(PL_MSG_DRAIN, b, &back), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "DRAIN: field 'drain'"), "%s", pl_error_msg());
    json_object_del(b, "drain");
    cr_assert_eq(pl_msg_decode(PL_MSG_DRAIN, b, &back), PL_ERR_PROTOCOL);
    json_object_set_new(b, "drain", json_false());
    json_object_set_new(b, "node", json_string(""));
    cr_assert_eq(pl_msg_decode(PL_MSG_DRAIN, b, &back), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "node"), "%s", pl_error_msg());
    char long_name[PL_CFG_NAME_MAX + 8];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    json_object_set_new(b, "node", json_string(long_name));
    cr_assert_eq(pl_msg_decode(PL_MSG_DRAIN, b, &back), PL_ERR_PROTOCOL);
    json_decref(b);
    cr_assert_eq(pl_msg_decode(PL_MSG_JOBS, json_object(), &back), PL_OK);
}
