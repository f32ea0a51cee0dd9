/* `pipectl plan` (the plan a job would get on the live cluster, or on a described one without
 * a coordinator) and `catalog` (the device kinds a described cluster can name). */
#include "tools/pipectl/pipectl.h"

#include "common/config.h"
#include "pipeline/gen.h"
#include "scheduler/catalog.h"
#include "scheduler/inputs.h"
#include "scheduler/modes.h"
#include "scheduler/whatif.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A plan reply {"plan", "note", "busy"} as a table, or as it is with -o json. */
static int s_show_plan(const pl_pipectl_t *c, json_t *r)
{
    size_t i;
    json_t *b;
    if (c->json) {
        pl_pipectl_print(c, r);
        return 0;
    }
    pl_pipectl_print_plan(json_object_get(r, "plan"));
    const char *note = pl_pipectl_str(r, "note");
    if (*note && strcmp(note, "-"))
        printf("note: %s\n", note);
    json_array_foreach(json_object_get(r, "busy"), i, b)
        printf("note: %s is busy with job %d now\n", pl_pipectl_str(b, "node"),
               (int)pl_pipectl_num(b, "job"));
    return 0;
}

/* Plan on a described cluster, here, without a coordinator. */
static int s_plan_whatif(const pl_pipectl_t *c, const pl_job_spec_t *spec, const char *cluster_path)
{
    static pl_cfg_cluster_t cl;
    static pl_sched_plan_inputs_t pi;
    pl_sched_device_t *devs = NULL;
    pl_sched_link_t *links = NULL;
    pl_model_t *model = NULL;
    pl_model_bytes_t *bytes = NULL;
    pl_plan_t *plan = NULL;
    int n = 0, rc = 1;

    if (pl_cfg_cluster_load(cluster_path, &cl) || pl_sched_whatif(&cl, &devs, &n, &links)) {
        rc = pl_pipectl_die("%s", pl_error_msg());
        goto out;
    }
    /* the stored bytes of the model's tensors; a model described by its config.json alone
     * (planning before a download) is charged in the config's dtype */
    pl_model_config_t cfg;
    bool described = pl_model_is_described(spec->model);
    if (described ? pl_model_config_load(spec->model, &cfg) || pl_model_bytes_estimate(&cfg, &bytes)
                  : pl_model_open(spec->model, &model) || pl_model_bytes_new(model, &bytes)) {
        rc = pl_pipectl_die("%s", pl_error_msg());
        goto out;
    }
    if (!described)
        cfg = *pl_model_config(model);
    pl_gen_job_t g; /* the coordinator's checks: token ids in the vocabulary, positions */
    if (pl_gen_job_from_spec(spec, spec->microbatches, &cfg, &g)) {
        rc = pl_pipectl_die("%s", pl_error_msg());
        goto out;
    }
    pl_gen_job_clear(&g);
    if (pl_sched_plan_spec(spec, &cfg, bytes, devs, n, links, NULL, pl_gen_spec_wire_bytes(spec),
                           &pi, &plan)) {
        rc = pl_pipectl_die("no feasible plan: %s", pl_error_msg());
        goto out;
    }
    char note[256] = "";
    pl_sched_waves_note(plan, note, sizeof(note));
    json_t *pj = pl_plan_to_json_full(plan, &pi.in, spec->planner);
    json_t *r = pj ? json_pack("{s:o, s:s, s:[]}", "plan", pj, "note", note, "busy") : NULL;
    if (!r) {
        rc = pl_pipectl_die("%s", "out of memory");
        goto out;
    }
    rc = s_show_plan(c, r);
    json_decref(r);
out:
    pl_plan_destroy(&plan);
    pl_sched_plan_inputs_clear(&pi);
    pl_model_bytes_destroy(&bytes);
    pl_model_destroy(&model);
    free(devs);
    free(links);
    return rc;
}

static int s_plan(pl_pipectl_t *c, const char *path, int stages, const char *cluster)
{
    pl_msg_t *m = malloc(sizeof(*m));
    json_t *r;
    int rc;
    if (!m)
        return pl_pipectl_die("%s", "out of memory");
    if (pl_pipectl_job_msg(path, stages, PL_MSG_PLAN, m))
        rc = 1;
    else if (cluster)
        rc = s_plan_whatif(c, &m->submit, cluster);
    else if (!(rc = pl_pipectl_call(c, m, &r))) {
        rc = s_show_plan(c, r);
        json_decref(r);
    }
    pl_msg_clear(m);
    free(m);
    return rc;
}

static int s_catalog(const pl_pipectl_t *c)
{
    json_t *arr = json_array();
    for (int i = 0; i < pl_sched_catalog_count(); i++) {
        const pl_sched_catalog_entry_t *e = pl_sched_catalog_get(i);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:I}", "name", e->name,
                                             "aliases", e->aliases, "vendor", e->vendor, "backend",
                                             e->backend, "tflops", e->tflops, "mem_gbps",
                                             e->mem_gbps, "mem_bytes", (json_int_t)e->mem_bytes));
    }
    if (c->json) {
        pl_pipectl_print(c, arr);
    } else {
        size_t i;
        json_t *e;
        printf("%-22s %-8s %-7s %10s %10s %9s\n", "KIND", "VENDOR", "BACKEND", "TFLOP/S", "GB/S",
               "MEM(GiB)");
        json_array_foreach(arr, i, e)
        {
            printf("%-22s %-8s %-7s %10.1f %10.1f %9.0f\n", pl_pipectl_str(e, "name"),
                   pl_pipectl_str(e, "vendor"), pl_pipectl_str(e, "backend"),
                   pl_pipectl_num(e, "tflops"), pl_pipectl_num(e, "mem_gbps"),
                   pl_pipectl_num(e, "mem_bytes") / 1073741824.0);
        }
    }
    json_decref(arr);
    return 0;
}

int pl_pipectl_plan(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    return s_plan(c, args[0], c->stages, c->cluster);
}

int pl_pipectl_catalog(pl_pipectl_t *c, char **args, int n_args)
{
    (void)args;
    (void)n_args;
    return s_catalog(c);
}
