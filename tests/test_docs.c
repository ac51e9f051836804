/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The documents say what the code does: env.md lists exactly the variables
 * the config module reads (its names array, both ways), and the table of
 * built-in `auto` crossovers in README.md and env.md is the one the built-in
 * tables of src/route/auto_defaults.c parse to. A table that drifted fails
 * with the table the code gives, ready to paste.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc_test.h"
#include "auto_table.h"
#include "p2pt_internal.h"

#define AUTO_MARK "<!-- auto-defaults:"

static const char *next_line(const char *line)
{
    const char *nl = strchr(line, '\n');
    return nl ? nl + 1 : NULL;
}

static bool known(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* The names in the first column of env.md's tables ("| `P2P_X` |") that the
 * library reads: P2P_*, not the Python package's P2PT_*. */
static size_t env_md_names(const char *text, char names[][64], size_t max)
{
    size_t n = 0;
    for (const char *line = text; line && *line; line = next_line(line)) {
        if (strncmp(line, "| `P2P_", 7) != 0)
            continue;
        const char *end = strchr(line + 3, '`');
        if (end == NULL || n == max || (size_t)(end - line - 3) >= 64)
            continue;
        snprintf(names[n], 64, "%.*s", (int)(end - line - 3), line + 3);
        n++;
    }
    return n;
}

/* Every variable the configuration reads: the shared ones and those each
 * registered engine declares. */
static size_t known_vars(const char **names)
{
    struct p2pt_config_known known;
    p2pt__config_known(&known);
    return p2pt__config_known_vars(&known, names, P2PT_CONFIG_VARS_MAX);
}

Test(docs, env_md_documents_every_variable_the_config_reads)
{
    const char *names[P2PT_CONFIG_VARS_MAX];
    size_t n_known = known_vars(names);
    char documented[64][64];
    size_t n_doc = env_md_names(read_doc("env.md"), documented, 64);
    cr_assert_gt(n_known, 0);
    for (size_t i = 0; i < n_known; i++) {
        bool found = false;
        for (size_t j = 0; j < n_doc; j++)
            found = found || strcmp(documented[j], names[i]) == 0;
        cr_expect(found, "env.md has no row for %s, which the configuration reads", names[i]);
    }
}

Test(docs, env_md_documents_no_variable_the_config_does_not_read)
{
    const char *names[P2PT_CONFIG_VARS_MAX];
    size_t n_known = known_vars(names);
    char documented[64][64];
    size_t n_doc = env_md_names(read_doc("env.md"), documented, 64);
    cr_assert_gt(n_doc, 0, "env.md has no variable row");
    for (size_t j = 0; j < n_doc; j++)
        cr_expect(known(names, n_known, documented[j]),
                  "env.md documents %s, which the configuration does not read", documented[j]);
}

/* One cell: "tma", "tma; ce from 32M", or "—" for a list the table lacks. */
static void cell(char *out, size_t len, const struct p2pt_auto_list *l, const char *const *eng)
{
    size_t used = 0;
    out[0] = '\0';
    if (l->n == 0) {
        snprintf(out, len, "—");
        return;
    }
    for (uint32_t i = 0; i < l->n && used < len; i++) {
        char size[24];
        if (i == 0)
            used += (size_t)snprintf(out + used, len - used, "%s", eng[l->band[i].engine]);
        else
            used += (size_t)snprintf(out + used, len - used, "; %s from %s",
                                     eng[l->band[i].engine],
                                     p2pt__auto_size_text(l->band[i].from, size));
    }
}

/* The markdown table of every built-in table, a column each. */
static void builtin_markdown(char *out, size_t len)
{
    static const char *const engines[] = {"ce", "tma"};
    struct p2pt_auto_table t[8];
    int n = 0;
    size_t used = 0;
    used += (size_t)snprintf(out + used, len - used, "| list |");
    for (const struct p2pt_auto_builtin *b = p2pt__auto_builtins; b->text && n < 8; b++, n++) {
        cr_assert_eq(p2pt__auto_table_parse(b->text, strlen(b->text), "built-in", engines, 2,
                                            &t[n]),
                     P2PT_SUCCESS, "%s", p2pt__last_error_text());
        if (b->device)
            used += (size_t)snprintf(out + used, len - used, " sm_%d, name has `%s` |", b->cc,
                                     b->device);
        else
            used += (size_t)snprintf(out + used, len - used, " sm_%d default (%s) |", b->cc,
                                     t[n].device);
    }
    used += (size_t)snprintf(out + used, len - used, "\n| --- |");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(out + used, len - used, " --- |");
    used += (size_t)snprintf(out + used, len - used, "\n");
    /* copy and graph per path, batch, then batch per host path */
    for (int kind = 0; kind < 3; kind++) {
        int paths = kind == 2 ? 1 + P2PT_AUTO_HOST_PATHS : P2PT_AUTO_PATHS;
        for (int p = 0; p < paths; p++) {
            const struct p2pt_auto_list *lists[8];
            bool any = false;
            for (int i = 0; i < n; i++) {
                lists[i] = kind == 0   ? &t[i].copy[p]
                           : kind == 1 ? &t[i].graph[p]
                           : p == 0    ? &t[i].batch
                                       : &t[i].host_batch[p - 1];
                any = any || lists[i]->n > 0;
            }
            if (!any)
                continue;
            if (kind == 2 && p == 0)
                used += (size_t)snprintf(out + used, len - used, "| `batch` |");
            else
                used += (size_t)snprintf(
                    out + used, len - used, "| `%s %s` |",
                    kind == 0 ? "copy" : kind == 1 ? "graph" : "batch",
                    p2pt__auto_path_names[kind == 2 ? P2PT_AUTO_H2D + p - 1 : p]);
            for (int i = 0; i < n; i++) {
                char c[256];
                cell(c, sizeof(c), lists[i], engines);
                used += (size_t)snprintf(out + used, len - used, " %s |", c);
            }
            used += (size_t)snprintf(out + used, len - used, "\n");
        }
    }
    cr_assert_lt(used, len, "the table outgrew its buffer");
}

/* The table after the marker line, up to the first line that is not a row. */
static void doc_table(const char *text, const char *doc, char *out, size_t len)
{
    const char *mark = strstr(text, AUTO_MARK);
    cr_assert_not_null(mark, "%s has no \"" AUTO_MARK "\" line before its table", doc);
    const char *start = strchr(mark, '\n'), *end;
    cr_assert_not_null(start);
    start++;
    for (end = start; end && *end == '|';)
        end = next_line(end);
    if (end == NULL)
        end = start + strlen(start);
    snprintf(out, len, "%.*s", (int)(end - start), start);
}

static void expect_doc_matches(const char *doc)
{
    static char want[16384], got[16384];
    builtin_markdown(want, sizeof(want));
    doc_table(read_doc(doc), doc, got, sizeof(got));
    cr_expect_str_eq(got, want,
                     "%s's table of built-in crossovers is not what src/route/auto_defaults.c "
                     "says; it should read:\n%s",
                     doc, want);
}

Test(docs, readme_crossover_table_is_the_builtin_tables)
{
    expect_doc_matches("README.md");
}

Test(docs, env_md_crossover_table_is_the_builtin_tables)
{
    expect_doc_matches("env.md");
}
