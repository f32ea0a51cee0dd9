/* pipectl's output helpers: JSON as -o json prints it, fields of a reply read for tables, and
 * the units tables write durations and sizes in. */
#include "tools/pipectl/pipectl.h"

#include "scheduler/plan.h"

#include <stdio.h>
#include <stdlib.h>

void pl_pipectl_print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
        puts(s);
    free(s);
}

void pl_pipectl_print_to(const pl_pipectl_t *c, FILE *f, const json_t *v)
{
    if (c->out == PL_PIPECTL_OUT_YAML) {
        pl_pipectl_yaml(f, v);
        return;
    }
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
        fprintf(f, "%s\n", s);
    free(s);
}

bool pl_pipectl_print_answer(const pl_pipectl_t *c, FILE *f, json_t *r)
{
    if (!c->json)
        return false;
    pl_pipectl_print_to(c, f, r);
    json_decref(r);
    return true;
}

void pl_pipectl_print(const pl_pipectl_t *c, const json_t *v)
{
    pl_pipectl_print_to(c, stdout, v);
}

const char *pl_pipectl_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

double pl_pipectl_num(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

const char *pl_pipectl_dur(double v, char *b, size_t n)
{
    if (v <= 0)
        snprintf(b, n, "-");
    else
        pl_sched_fmt_time(v, b, n);
    return b;
}

const char *pl_pipectl_bytes(double v, char *b, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    for (; v >= 1024 && k < 4; k++)
        v /= 1024;
    snprintf(b, n, k ? "%.2f %s" : "%.0f %s", v, u[k]);
    return b;
}

void pl_pipectl_print_throughput(FILE *f, const json_t *t)
{
    if (!json_is_object(t))
        return;
    fprintf(f,
            "throughput: %d prompt tokens, %d generated in %.3f s | prefill %.1f tok/s | "
            "decode %.1f tok/s | overall %.1f tok/s\n",
            (int)pl_pipectl_num(t, "prompt_tokens"), (int)pl_pipectl_num(t, "generated_tokens"),
            pl_pipectl_num(t, "wall_s"), pl_pipectl_num(t, "prefill_tok_s"),
            pl_pipectl_num(t, "decode_tok_s"), pl_pipectl_num(t, "tok_s"));
}

void pl_pipectl_print_plan(const json_t *plan)
{
    if (!json_is_object(plan))
        return;
    printf("planner: %s\n%s", pl_pipectl_str(plan, "planner"), pl_pipectl_str(plan, "table"));
}
