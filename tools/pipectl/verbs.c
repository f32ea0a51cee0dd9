/* pipectl's verb table: each verb's name, arguments, one-line summary, example and handler, in
 * one place, so that `pipectl --help`, `pipectl VERB --help` and the dispatch agree. A new verb
 * is one entry here and its handler in a file of tools/pipectl/. */
#include "tools/pipectl/pipectl.h"

#include <string.h>

static const pl_pipectl_verb_t s_verbs[] = {
    {"submit", "JOB.yaml [--wait] [--stages N]",
     "queue a job (--wait: follow it, print results)", "pipectl submit etc/job.yaml --wait", 1, 1,
     PL_PIPECTL_OPT_WAIT | PL_PIPECTL_OPT_STAGES, false, pl_pipectl_submit},
    {"plan", "JOB.yaml [--stages N] [--cluster WHATIF.yaml]",
     "the plan the job would get on the live cluster, or on a described one (no coordinator "
     "needed)",
     "pipectl plan etc/job.yaml --cluster etc/whatif.yaml", 1, 1,
     PL_PIPECTL_OPT_STAGES | PL_PIPECTL_OPT_CLUSTER, false, pl_pipectl_plan},
    {"catalog", "", "device kinds a described cluster can use", "pipectl catalog -o json", 0, 0,
     0, true, pl_pipectl_catalog},
    {"status", "JOB", "state, plan and throughput of a job", "pipectl status 1", 1, 1, 0, false,
     pl_pipectl_status},
    {"results", "JOB",
     "the job's output in prompt order: the text of a text job, else JSONL of token ids",
     "pipectl results 1", 1, 1, 0, false, pl_pipectl_results},
    {"generate",
     "MODEL PROMPT [--max-tokens N] [--temperature T] [--chat] [--stop S]... [--stages N]",
     "run one prompt (text; --chat: a user message in the model's chat template) and print its "
     "text as it is generated",
     "pipectl generate models/llama3 \"Why is the sky blue?\" --chat --max-tokens 200", 2, 2,
     PL_PIPECTL_OPT_GEN | PL_PIPECTL_OPT_STAGES, false, pl_pipectl_generate_verb},
    {"cancel", "JOB", "stop a job", "pipectl cancel 1", 1, 1, 0, false, pl_pipectl_cancel},
    {"nodes", "", "the cluster's nodes and devices", "pipectl nodes", 0, 0, 0, false,
     pl_pipectl_nodes},
    {"health", "NODE", "one node's devices and heartbeat", "pipectl health node0", 1, 1, 0, false,
     pl_pipectl_health},
    {"shutdown", "", "stop the coordinator and its daemons", "pipectl shutdown", 0, 0, 0, false,
     pl_pipectl_shutdown},
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
    fprintf(f, "usage: pipectl [-c ENDPOINT] [-o table|json] [--timeout S] COMMAND ...\n");
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
            "The endpoint defaults to $PIPELD_COORDINATOR, else tcp://127.0.0.1:5555. A\n"
            "coordinator with keys in its cluster file needs -k PUBLIC_KEY (or\n"
            "$PIPELD_COORDINATOR_KEY) and --key FILE (or $PIPELD_KEY_FILE), a secret key on its\n"
            "allow-list; without them pipectl uses the local cluster's keys (the state\n"
            "directory's keys/: $PIPELD_STATE_DIR, else $XDG_STATE_HOME/pipeld, else\n"
            "~/.local/state/pipeld).\n"
            "`pipectl COMMAND --help` shows one command with an example.\n"
            "Example: pipectl generate models/llama3 \"Why is the sky blue?\" --chat "
            "--max-tokens 200\n");
}

void pl_pipectl_verb_usage(FILE *f, const pl_pipectl_verb_t *v)
{
    fprintf(f, "usage: pipectl [-c ENDPOINT] [-o table|json] %s%s%s\n", v->name,
            *v->args ? " " : "", v->args);
    s_wrapped(f, v->summary, 0, 0, 94);
    fprintf(f, "Example: %s\n", v->example);
}
