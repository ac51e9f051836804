/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The documents point at files that exist: every `src/...` path a reader is
 * told to open (in backticks or as a link) is in the tree, and every
 * relative markdown link resolves. Files move between modules; a path left
 * behind sends the reader nowhere. The documents are the ones a user reads
 * (README.md, env.md, CHANGELOG.md, docs/, bench/RESULTS.md and
 * bench/results/, python/README.md), globbed as the tree is now. A link
 * that climbs out of the tree (CHANGELOG's `../../compare/A...B`) is a
 * route of the repository's host, not a file: tests/test_changelog.c checks
 * those. A failure names the document, its line and the path.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The documents, as patterns under the source tree. */
static const char *const doc_patterns[] = {
    "README.md",        "env.md",           "CHANGELOG.md",         "docs/*.md",
    "bench/RESULTS.md", "bench/results/*.md", "python/README.md",
};

struct doc {
    char name[512]; /* relative to the source tree */
    char *text;
};

struct counts {
    int checked, missing;
    bool quiet; /* count what is missing without failing the test */
};

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    cr_assert_geq(size, 0);
    rewind(f);
    char *text = malloc((size_t)size + 1);
    cr_assert_not_null(text);
    size_t n = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* Every document that exists now; returns how many. */
static int list_docs(struct doc *docs, int max)
{
    int n = 0;
    for (size_t p = 0; p < sizeof(doc_patterns) / sizeof(doc_patterns[0]); p++) {
        char pattern[1024];
        glob_t g;
        snprintf(pattern, sizeof(pattern), "%s/%s", P2PT_SOURCE_DIR, doc_patterns[p]);
        if (glob(pattern, 0, NULL, &g) != 0)
            continue;
        for (size_t i = 0; i < g.gl_pathc && n < max; i++, n++) {
            snprintf(docs[n].name, sizeof(docs[n].name), "%s",
                     g.gl_pathv[i] + strlen(P2PT_SOURCE_DIR) + 1);
            docs[n].text = read_all(g.gl_pathv[i]);
        }
        globfree(&g);
    }
    return n;
}

static bool exists(const char *relative)
{
    char path[2048];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", P2PT_SOURCE_DIR, relative);
    return stat(path, &st) == 0;
}

static bool path_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-' || c == '/';
}

/* Each `src/...` path in the code span [s, e): a pattern (a glob of `src/x/`,
 * `src/{a,b}`) is not a path and is left alone. */
static void check_span(const struct doc *d, int line, const char *s, const char *e,
                       struct counts *c)
{
    for (const char *p = s; p + 4 <= e; p++) {
        if (strncmp(p, "src/", 4) != 0 || (p > s && path_char(p[-1])))
            continue;
        const char *end = p;
        while (end < e && path_char(*end))
            end++;
        if (end < e && strchr("{*<$[", *end) != NULL)
            continue;
        while (end > p + 4 && end[-1] == '.')
            end--;
        char path[512];
        snprintf(path, sizeof(path), "%.*s", (int)(end - p), p);
        c->checked++;
        if (!exists(path)) {
            c->missing++;
            cr_expect(c->quiet, "%s:%d names `%s`, which is not in the source tree", d->name,
                      line, path);
        }
        p = end - 1;
    }
}

/* `target` of a link in document `d`, as a path under the source tree into
 * `out`; false for what is not a file of the tree (a URL, an anchor alone, a
 * route that climbs out of the tree). */
static bool link_path(const struct doc *d, const char *target, size_t len, char *out,
                      size_t out_len)
{
    char t[1024];
    snprintf(t, sizeof(t), "%.*s", (int)len, target);
    t[strcspn(t, "#? \t")] = '\0';
    if (t[0] == '\0' || strchr(t, ':') != NULL)
        return false;
    /* Lexically, from the document's folder ("/x": from the tree's root). */
    char joined[2048], *parts[256];
    int depth = 0;
    if (t[0] == '/') {
        snprintf(joined, sizeof(joined), "%s", t + 1);
    } else {
        const char *slash = strrchr(d->name, '/');
        snprintf(joined, sizeof(joined), "%.*s%s%s", slash ? (int)(slash - d->name) : 0, d->name,
                 slash ? "/" : "", t);
    }
    char *save = NULL;
    for (char *part = strtok_r(joined, "/", &save); part != NULL;
         part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0)
            continue;
        if (strcmp(part, "..") == 0) {
            if (depth == 0)
                return false;
            depth--;
        } else if (depth < 256) {
            parts[depth++] = part;
        }
    }
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < depth && used < out_len; i++)
        used += (size_t)snprintf(out + used, out_len - used, "%s%s", i ? "/" : "", parts[i]);
    if (depth == 0)
        snprintf(out, out_len, ".");
    return true;
}

static void check_link(const struct doc *d, int line, const char *target, size_t len,
                       struct counts *c)
{
    char path[2048];
    if (len > 1 && target[0] == '<' && target[len - 1] == '>')
        target++, len -= 2;
    if (!link_path(d, target, len, path, sizeof(path)))
        return;
    c->checked++;
    if (!exists(path)) {
        c->missing++;
        cr_expect(c->quiet, "%s:%d links to %.*s (%s), which is not in the source tree",
                  d->name, line, (int)len, target, path);
    }
}

/* Walk document `d` outside fenced code blocks: code spans go to
 * check_span when `spans`, inline links and link definitions to check_link
 * when `links`. */
static void walk(const struct doc *d, bool spans, bool links, struct counts *c)
{
    bool fenced = false;
    int line = 0;
    for (const char *l = d->text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *eol = strchr(l, '\n');
        if (eol == NULL)
            eol = l + strlen(l);
        line++;
        const char *t = l + strspn(l, " ");
        if (strncmp(t, "```", 3) == 0 || strncmp(t, "~~~", 3) == 0) {
            fenced = !fenced;
            continue;
        }
        if (fenced)
            continue;
        /* "[name]: target" */
        if (links && *t == '[') {
            const char *close = strstr(t, "]: ");
            if (close != NULL && close < eol && memchr(t, '`', (size_t)(close - t)) == NULL) {
                const char *target = close + 3;
                check_link(d, line, target, strcspn(target, " \t\n"), c);
                continue;
            }
        }
        for (const char *p = l; p < eol; p++) {
            if (*p == '`') {
                size_t ticks = strspn(p, "`");
                const char *close = p + ticks;
                while (close < eol && !(strncmp(close, p, ticks) == 0 && close[ticks] != '`'))
                    close++;
                if (close >= eol) {
                    p += ticks - 1;
                    continue;
                }
                if (spans)
                    check_span(d, line, p + ticks, close, c);
                p = close + ticks - 1;
            } else if (links && p[0] == ']' && p[1] == '(') {
                const char *target = p + 2, *end = target;
                while (end < eol && *end != ')')
                    end++;
                check_link(d, line, target, (size_t)(end - target), c);
                p = end;
            }
        }
    }
}

static void check_docs(bool spans, bool links, const char *what)
{
    static struct doc docs[256];
    int n = list_docs(docs, 256);
    cr_assert_gt(n, 3, "found %d documents under %s", n, P2PT_SOURCE_DIR);
    struct counts c = {0, 0, false};
    for (int i = 0; i < n; i++) {
        walk(&docs[i], spans, links, &c);
        free(docs[i].text);
    }
    cr_assert_gt(c.checked, 10, "only %d %s found in %d documents: is the scan broken?",
                 c.checked, what, n);
    cr_expect_eq(c.missing, 0, "%d of %d %s point at nothing (above)", c.missing, c.checked,
                 what);
}

Test(doc_paths, every_src_path_the_docs_name_is_in_the_tree)
{
    check_docs(true, false, "`src/...` paths");
}

Test(doc_paths, every_relative_link_in_the_docs_resolves)
{
    check_docs(false, true, "relative links");
}

/* The scan itself: a path that is not there is found, in a span or a link. */
Test(doc_paths, a_missing_path_and_a_broken_link_are_found)
{
    struct doc d = {.name = "docs/X.md",
                    .text = "Read `src/util/config.c`, `src/nowhere/gone.c:12` and\n"
                            "[the layout](LAYOUT.md), [gone](../nowhere.md#a),\n"
                            "[host](../../compare/a...b), [web](https://example.org/x).\n"
                            "```\n`src/also/gone.c`\n```\n"
                            "[ref]: ../README.md\n"};
    struct counts spans = {0, 0, true}, links = {0, 0, true};
    walk(&d, true, false, &spans);
    walk(&d, false, true, &links);
    cr_assert_eq(spans.checked, 2, "spans checked: %d", spans.checked);
    cr_assert_eq(spans.missing, 1, "spans missing: %d", spans.missing);
    cr_assert_eq(links.checked, 3, "links checked: %d", links.checked);
    cr_assert_eq(links.missing, 1, "links missing: %d", links.missing);
}
