/* A node's health as its heartbeat carries it: version, uptime, the host's load, memory and CPU
 * frequency, each device's memory, utilisation, temperature, power and error counters, and the
 * UCX transports the node has. */
#include "common/json.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdio.h>
#include <string.h>

#include <ctype.h>

bool pl_msg_ucx_res_name_ok(const char *s, size_t n)
{
    size_t slashes = 0;
    if (!s || n == 0 || n >= PL_MSG_UCX_RES_LEN || s[0] == '/' || s[n - 1] == '/')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '/')
            slashes++;
        else if (!isalnum(c) && c != '_' && c != '.' && c != ':' && c != '-')
            return false;
    }
    return slashes == 1;
}

void pl_msg_node_health_init(pl_msg_node_health_t *m)
{
    memset(m, 0, sizeof(*m));
    m->uptime_s = m->load5 = m->load15 = m->cpu_mhz = -1;
    m->mem_total_kb = m->mem_avail_kb = -1;
}

/* Set key to an integer / a number when known (>= 0). */
static int s_int(json_t *o, const char *key, int64_t v)
{
    return v < 0 ? 0 : json_object_set_new(o, key, json_integer((json_int_t)v));
}

static int s_num(json_t *o, const char *key, double v)
{
    return v < 0 ? 0 : json_object_set_new(o, key, json_real(v));
}

pl_status_t pl_msg_node_health_encode(const pl_msg_node_health_t *m, json_t **body_p)
{
    json_t *o = json_object(), *devs = json_array(), *tls = json_array();
    int bad = !o || !devs || !tls;
    for (int i = 0; !bad && i < m->n_ucx; i++)
        bad = json_array_append_new(tls, json_string(m->ucx[i]));
    for (int i = 0; !bad && i < m->n_devices; i++) {
        const pl_msg_dev_health_t *d = &m->devices[i];
        json_t *e = json_pack("{s:s}", "id", d->id);
        if (!e || s_int(e, "memory_used_bytes", d->mem_used) ||
            s_int(e, "memory_total_bytes", d->mem_total) ||
            s_num(e, "utilization_pct", d->util_pct) || s_num(e, "temperature_c", d->temp_c) ||
            s_num(e, "power_w", d->power_w) || s_int(e, "errors", d->errors)) {
            json_decref(e);
            bad = 1;
        } else {
            bad = json_array_append_new(devs, e);
        }
    }
    bad = bad || json_object_set_new(o, "version", json_string(m->version)) ||
          s_num(o, "uptime_s", m->uptime_s) || s_num(o, "load5", m->load5) ||
          s_num(o, "load15", m->load15) || s_int(o, "mem_total_kb", m->mem_total_kb) ||
          s_int(o, "mem_avail_kb", m->mem_avail_kb) || s_num(o, "cpu_mhz", m->cpu_mhz) ||
          json_object_set(o, "devices", devs) ||
          (m->n_ucx > 0 && json_object_set(o, "ucx_transports", tls));
    json_decref(devs);
    json_decref(tls);
    if (bad) {
        json_decref(o);
        return pl_error(PL_ERR_INVALID, "HEARTBEAT: cannot encode the node's health");
    }
    *body_p = o;
    return PL_OK;
}

static pl_status_t s_dev(const json_t *e, pl_msg_dev_health_t *d)
{
    pl_status_t st;
    d->mem_used = d->mem_total = d->errors = -1;
    d->util_pct = d->temp_c = d->power_w = -1;
    if ((st = pl_msg_int_name(e, "id", d->id, sizeof(d->id) - 1)) ||
        (st = pl_json_int_opt(e, "memory_used_bytes", 0, INT64_MAX, &d->mem_used)) ||
        (st = pl_json_int_opt(e, "memory_total_bytes", 0, INT64_MAX, &d->mem_total)) ||
        (st = pl_json_num_opt(e, "utilization_pct", 0, 100, &d->util_pct)) ||
        (st = pl_json_num_opt(e, "temperature_c", 0, 1000, &d->temp_c)) ||
        (st = pl_json_num_opt(e, "power_w", 0, 1e6, &d->power_w)) ||
        (st = pl_json_int_opt(e, "errors", 0, INT64_MAX, &d->errors)))
        return st;
    if (d->mem_used >= 0 && d->mem_total >= 0 && d->mem_used > d->mem_total)
        return pl_error(PL_ERR_INVALID, "field 'memory_used_bytes': more than memory_total_bytes");
    return PL_OK;
}

pl_status_t pl_msg_node_health_decode(const json_t *body, pl_msg_node_health_t *out)
{
    pl_msg_node_health_t m;
    const char *version = NULL;
    json_t *devs = NULL;
    pl_status_t st;
    pl_msg_node_health_init(&m);
    if (!json_is_object(body))
        return pl_error(PL_ERR_INVALID, "expected an object");
    if ((st = pl_json_str_opt(body, "version", sizeof(m.version) - 1, &version)) ||
        (st = pl_json_num_opt(body, "uptime_s", 0, 1e10, &m.uptime_s)) ||
        (st = pl_json_num_opt(body, "load5", 0, 1e9, &m.load5)) ||
        (st = pl_json_num_opt(body, "load15", 0, 1e9, &m.load15)) ||
        (st = pl_json_int_opt(body, "mem_total_kb", 0, INT64_MAX, &m.mem_total_kb)) ||
        (st = pl_json_int_opt(body, "mem_avail_kb", 0, INT64_MAX, &m.mem_avail_kb)) ||
        (st = pl_json_num_opt(body, "cpu_mhz", 0, 1e6, &m.cpu_mhz)))
        return st;
    if (json_object_get(body, "devices") &&
        (st = pl_json_array(body, "devices", PL_MSG_MAX_DEVICES, &devs)))
        return st;
    for (size_t i = 0; i < json_array_size(devs); i++)
        if ((st = s_dev(json_array_get(devs, i), &m.devices[m.n_devices++])))
            return pl_error_prefix(st, "devices[%zu]: ", i);
    json_t *tls = NULL;
    if (json_object_get(body, "ucx_transports") &&
        (st = pl_json_array(body, "ucx_transports", PL_MSG_MAX_UCX_RES, &tls)))
        return st;
    for (size_t i = 0; i < json_array_size(tls); i++) {
        const char *name = json_string_value(json_array_get(tls, i));
        if (!name || !pl_msg_ucx_res_name_ok(name, strlen(name)))
            return pl_error(PL_ERR_INVALID,
                            "field 'ucx_transports[%zu]': not a UCX transport "
                            "name (transport/device, at most %d characters)",
                            i, PL_MSG_UCX_RES_LEN - 1);
        snprintf(m.ucx[m.n_ucx++], PL_MSG_UCX_RES_LEN, "%s", name);
    }
    if (m.mem_total_kb >= 0 && m.mem_avail_kb > m.mem_total_kb)
        return pl_error(PL_ERR_INVALID, "field 'mem_avail_kb': more than mem_total_kb");
    snprintf(m.version, sizeof(m.version), "%s", version ? version : "");
    *out = m;
    return PL_OK;
}
