/* `--watch`: a verb's view rendered every second and shown again when it changed (on a
 * terminal over the last one), until its state is final or Ctrl-C. */
#include "tools/pipectl/pipectl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_PERIOD_US (1000 * 1000)

static volatile sig_atomic_t s_stop;

static void s_on_sigint(int sig)
{
    (void)sig;
    s_stop = 1;
}

int pl_pipectl_watch(pl_pipectl_t *c, pl_pipectl_render_fn render, char **args, int n_args)
{
    bool final = false;
    if (!c->watch)
        return render(c, args, n_args, stdout, &final);
    struct sigaction sa = {.sa_handler = s_on_sigint}, old;
    sigaction(SIGINT, &sa, &old);
    bool tty = isatty(STDOUT_FILENO);
    char *last = NULL;
    int rc = 0;
    while (!s_stop) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            rc = pl_pipectl_die("%s", "out of memory");
            break;
        }
        rc = render(c, args, n_args, f, &final);
        fclose(f);
        if (!rc && (!last || strcmp(last, text))) {
            if (tty)
                fputs("\033[H\033[2J", stdout); /* home, clear: the view redrawn in place */
            else if (last)
                fputc('\n', stdout); /* a blank line between views */
            fputs(text, stdout);
            fflush(stdout);
            free(last);
            last = text;
        } else {
            free(text);
        }
        if (rc || final)
            break;
        usleep(S_PERIOD_US);
    }
    free(last);
    sigaction(SIGINT, &old, NULL);
    return rc;
}
