/* pipectl's verb table: each verb's name, arguments, one-line summary, example and handler, in
 * one place, so that `pipectl --help`, `pipectl VERB --help` and the dispatch agree. A new verb
 * is one entry here and its handler in a file of tools/pipectl/. */
#include "tools/pipectl/pipectl.h"

#include <string.h>

static const pl_pipectl_verb_t s_verbs[] = {
    {"nodes", "[--watch]",
     "the cluster's nodes: status (ready, busy, draining, unreachable), "
     "devices; -o wide adds heartbeat age, uptime, version and stages",
     "pipectl nodes -o wide", 0, 0, PL_PIPECTL_OPT_WATCH, false, pl_pipectl_nodes},
    {"health", "[NODE] [--watch]",
     "each node's (or one node's) state, heartbeat age, uptime, version, host load / memory / "
     "CPU frequency, device memory, utilisation, temperature, power and errors, transports and "
     "stages; unreachable nodes are named first",
     "pipectl health node0", 0, 1, PL_PIPECTL_OPT_WATCH, false, pl_pipectl_health},
    {"describe", "job ID | node NAME",
     "everything about one job (state, progress per stage, plan, events) or one node (health)",
     "pipectl describe job 1", 2, 2, 0, false, pl_pipectl_describe},
    {"jobs", "[--watch]", "the jobs you may see: state, sequences, tokens, stages, elapsed",
     "pipectl jobs -o wide", 0, 0, PL_PIPECTL_OPT_WATCH, false, pl_pipectl_jobs},
    {"submit", "JOB.yaml [--wait] [--stages N]",
     "queue a job (--wait: follow it with a progress bar on a terminal, then print its "
     "results; exit 1 when it fails)",
     "pipectl submit etc/job.yaml --wait", 1, 1, PL_PIPECTL_OPT_WAIT | PL_PIPECTL_OPT_STAGES, false,
     pl_pipectl_submit},
    {"train", "TRAIN.yaml [--wait] [--stages N]",
     "queue a training job (model, data, batch, optimizer, schedule, checkpoints: "
     "etc/train-tiny.yaml; --wait: follow it with a progress line of step/total, loss, "
     "tokens/s and ETA, then print the final loss; exit 1 when it fails)",
     "pipectl train etc/train-tiny.yaml --wait", 1, 1,
     PL_PIPECTL_OPT_WAIT | PL_PIPECTL_OPT_STAGES, false, pl_pipectl_train},
    {"status", "JOB [--watch]",
     "state, plan and throughput of a job (--watch: follow it with a progress bar until it ends)",
     "pipectl status 1 --watch", 1, 1, PL_PIPECTL_OPT_WATCH, false, pl_pipectl_status},
    {"results", "JOB",
     "the job's output in prompt order: the text of a text job, else JSONL of token ids",
     "pipectl results 1", 1, 1, 0, false, pl_pipectl_results},
    {"cancel", "JOB", "stop a job", "pipectl cancel 1", 1, 1, 0, false, pl_pipectl_cancel},
    {"logs", "JOB",
     "the job's events with their times: submitted, planned, loading, each "
     "stage ready and done, running, re-queued, its end",
     "pipectl logs 1", 1, 1, 0, false, pl_pipectl_logs},
    {"trace", "JOB [-o FILE.json] [--svg FILE.svg]",
     "the job's stage timelines: Chrome Trace JSON (Perfetto; to stdout without -o and --svg) "
     "and/or an SVG picture (here -o names the file)",
     "pipectl trace 1 -o trace.json --svg timeline.svg", 1, 1,
     PL_PIPECTL_OPT_OUTFILE | PL_PIPECTL_OPT_SVG, false, pl_pipectl_trace_verb},
    {"serve", "DEPLOY.yaml [--wait]",
     "deploy a model: plan it onto the cluster once and keep its stages loaded for requests "
     "(the OpenAI API, jobs naming it) until undeploy; --wait: until it is ready (a line per "
     "change while it loads); a name already deployed is refused (exit 1)",
     "pipectl serve etc/deploy-tiny.yaml --wait", 1, 1, PL_PIPECTL_OPT_WAIT, false,
     pl_pipectl_serve},
    {"deployments", "[--watch]",
     "the deployments: state (planning, loading, ready, resuming, failed), job, KV slots, "
     "requests live / queued / completed, output tok/s, plan (stages on nodes with their "
     "layers); -o wide adds context, lanes, resumes, model and note",
     "pipectl deployments -o wide", 0, 0, PL_PIPECTL_OPT_WATCH, false, pl_pipectl_deployments},
    {"undeploy", "NAME",
     "end a deployment (the cancel of its job): requests in flight end as canceled, the "
     "stages release their memory",
     "pipectl undeploy tiny", 1, 1, 0, false, pl_pipectl_undeploy},
    {"plan", "JOB.yaml [--stages N] [--cluster WHATIF.yaml]",
     "the plan the job would get on the live cluster, or on a described one (no coordinator "
     "needed)",
     "pipectl plan etc/job.yaml --cluster etc/whatif.yaml", 1, 1,
     PL_PIPECTL_OPT_STAGES | PL_PIPECTL_OPT_CLUSTER, false, pl_pipectl_plan},
    {"catalog", "", "device kinds a described cluster can use", "pipectl catalog -o json", 0, 0, 0,
     true, pl_pipectl_catalog},
    {"generate",
     "MODEL PROMPT [--max-tokens N] [--temperature T] [--chat] [--stop S]... [--stages N]",
     "run one prompt (text; --chat: a user message in the model's chat template) and print its "
     "text as it is generated",
     "pipectl generate models/llama3 \"Why is the sky blue?\" --chat --max-tokens 200", 2, 2,
     PL_PIPECTL_OPT_GEN | PL_PIPECTL_OPT_STAGES, false, pl_pipectl_generate_verb},
    {"drain", "NODE",
     "admin: no new stages on the node (the running ones finish); kept across "
     "restarts",
     "pipectl drain node1", 1, 1, 0, false, pl_pipectl_drain},
    {"undrain", "NODE", "admin: the node takes new stages again", "pipectl undrain node1", 1, 1, 0,
     false, pl_pipectl_undrain},
    {"shutdown", "", "admin: stop the coordinator and its daemons", "pipectl shutdown", 0, 0, 0,
     false, pl_pipectl_shutdown},
    {"keygen", "BASE", "write a CURVE key pair: BASE.key (the secret, 0600) and BASE.pub",
     "pipectl keygen keys/alice", 1, 1, 0, true, pl_pipectl_keygen},
};

const pl_pipectl_verb_t *pl_pipectl_verb_find(const char *name)
{
    for (size_t i = 0; i < sizeof(s_verbs) / sizeof(s_verbs[0]); i++)
        if (!strcmp(s_verbs[i].name, name))
            return &s_verbs[i];
    return NULL;
}

/* Text wrapped at `width` columns, each line after the first indented by `indent`. */
static void s_wrapped(FILE *f, const char *text, int col, int indent, int width)
{
    while (*text) {
        int len = (int)strcspn(text, " ");
        if (col > indent && col + 1 + len > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", len, text);
        col += len;
        text += len;
        while (*text == ' ')
            text++;
    }
    fputc('\n', f);
}

void pl_pipectl_usage(FILE *f)
{
    fprintf(f, "usage: pipectl [-c ENDPOINT] [-o table|wide|json|yaml] [--timeout S] COMMAND "
               "...\n");
    for (size_t i = 0; i < sizeof(s_verbs) / sizeof(s_verbs[0]); i++) {
        const pl_pipectl_verb_t *v = &s_verbs[i];
        char head[160];
        int n = snprintf(head, sizeof(head), "  %s%s%s", v->name, *v->args ? " " : "", v->args);
        if (n > 40) { /* a long usage line: the summary below it */
            fprintf(f, "%s\n%41s", head, "");
            s_wrapped(f, v->summary, 41, 41, 94);
        } else {
            fprintf(f, "%-41s", head);
            s_wrapped(f, v->summary, 41, 41, 94);
        }
    }
    fprintf(f,
            "Settings come from the flags, then the environment, then the user file\n"
            "$XDG_CONFIG_HOME/pipeld/pipectl.yaml (else ~/.config/pipeld/pipectl.yaml; or\n"
            "$PIPECTL_CONFIG) with keys coordinator, coordinator_public_key, key_file, output,\n"
            "timeout_s: -c / $PIPECTL_COORDINATOR (or $PIPELD_COORDINATOR), default\n"
            "tcp://127.0.0.1:5555; -o / $PIPECTL_OUTPUT; --timeout / $PIPECTL_TIMEOUT; -k /\n"
            "$PIPECTL_COORDINATOR_KEY (or $PIPELD_COORDINATOR_KEY) and --key / $PIPECTL_KEY_FILE\n"
            "(or $PIPELD_KEY_FILE) for a coordinator with keys in its cluster file; without them\n"
            "pipectl uses the local cluster's keys (the state directory's keys/:\n"
            "$PIPELD_STATE_DIR, else $XDG_STATE_HOME/pipeld, else ~/.local/state/pipeld).\n"
            "Exit status: 0 ok, 1 a failed job or a refused request, 2 usage (command line or\n"
            "settings file), 3 the coordinator did not answer.\n"
            "`pipectl COMMAND --help` shows one command with an example.\n"
            "Example: pipectl generate models/llama3 \"Why is the sky blue?\" --chat "
            "--max-tokens 200\n");
}

void pl_pipectl_verb_usage(FILE *f, const pl_pipectl_verb_t *v)
{
    fprintf(f, "usage: pipectl [-c ENDPOINT] [-o table|wide|json|yaml] %s%s%s\n", v->name,
            *v->args ? " " : "", v->args);
    s_wrapped(f, v->summary, 0, 0, 94);
    fprintf(f, "Example: %s\n", v->example);
}
