/* YAML from a JSON value, for `-o yaml`: block style, strings quoted (JSON escapes are YAML's
 * double-quoted escapes) unless they are plain words, so every verb's YAML holds the same
 * values as its JSON. */
#include "tools/pipectl/pipectl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* A string YAML reads back as the same string without quotes: a letter, then letters, digits
 * and _ . / -, and not a word YAML gives a meaning (true, null, ...). */
static bool s_plain(const char *s)
{
    static const char *const words[] = {"true", "false", "yes", "no",  "on",       "off",
                                        "null", "y",     "n",   "nan", "infinity", "inf"};
    if (!isalpha((unsigned char)s[0]))
        return false;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./-", *p))
            return false;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (!strcasecmp(s, words[i]))
            return false;
    return true;
}

static void s_scalar(FILE *f, const json_t *v)
{
    if (json_is_string(v) && s_plain(json_string_value(v))) {
        fputs(json_string_value(v), f);
        return;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    fputs(s ? s : "null", f);
    free(s);
}

static bool s_block(const json_t *v)
{
    return (json_is_object(v) && json_object_size(v) > 0) ||
           (json_is_array(v) && json_array_size(v) > 0);
}

static void s_key(FILE *f, const char *k)
{
    json_t *s = json_string(k);
    s_scalar(f, s);
    json_decref(s);
    fputc(':', f);
}

/* v at `indent`; its first line continues the current one when `inline_first` (after "- "). */
static void s_node(FILE *f, const json_t *v, int indent, bool inline_first)
{
    bool first = true;
    if (json_is_object(v)) {
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e)
        {
            if (!(first && inline_first))
                fprintf(f, "%*s", indent, "");
            first = false;
            s_key(f, k);
            if (s_block(e)) {
                fputc('\n', f);
                s_node(f, e, indent + 2, false);
            } else {
                fputc(' ', f);
                if (json_is_object(e))
                    fputs("{}", f);
                else
                    s_scalar(f, e);
                fputc('\n', f);
            }
        }
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!(first && inline_first))
            fprintf(f, "%*s", indent, "");
        first = false;
        fputs("- ", f);
        if (json_is_object(e) && json_object_size(e) > 0) {
            s_node(f, e, indent + 2, true);
        } else if (json_is_array(e) && json_array_size(e) > 0) {
            fputc('\n', f);
            s_node(f, e, indent + 2, false);
        } else {
            if (json_is_object(e))
                fputs("{}", f);
            else
                s_scalar(f, e);
            fputc('\n', f);
        }
    }
}

void pl_pipectl_yaml(FILE *f, const json_t *v)
{
    if (s_block(v)) {
        s_node(f, v, 0, false);
    } else {
        if (json_is_object(v))
            fputs("{}", f);
        else
            s_scalar(f, v);
        fputc('\n', f);
    }
}
