/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CHANGELOG.md as a release tool reads it: every version heading has a link
 * definition, every link definition to a commit, a tree or a comparison
 * names revisions that exist in this checkout (tags are not in every clone,
 * so the links name commits), and the newest release is the version that
 * include/p2pt.h says. Without a full git checkout (a tarball, a shallow
 * clone) the links cannot be resolved and that test skips saying so.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt.h"

static char text[256 * 1024];

static void read_changelog(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/CHANGELOG.md", P2PT_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
}

/* The first line of `cmd`'s output (without its newline); false if none. */
static bool run(const char *cmd, char *out, size_t len)
{
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return false;
    bool got = fgets(out, (int)len, p) != NULL;
    int rc = pclose(p);
    if (got)
        out[strcspn(out, "\n")] = '\0';
    return got && rc == 0;
}

static bool resolves(const char *rev)
{
    char cmd[1400], out[128];
    snprintf(cmd, sizeof(cmd), "git -C '%s' rev-parse --verify --quiet '%s^{commit}' 2>/dev/null",
             P2PT_SOURCE_DIR, rev);
    return run(cmd, out, sizeof(out));
}

static const char *next_line(const char *line)
{
    const char *nl = strchr(line, '\n');
    return nl ? nl + 1 : NULL;
}

Test(changelog, every_link_names_revisions_this_checkout_has)
{
    char cmd[1200], out[64];
    snprintf(cmd, sizeof(cmd), "git -C '%s' rev-parse --is-shallow-repository 2>/dev/null",
             P2PT_SOURCE_DIR);
    if (!run(cmd, out, sizeof(out)))
        cr_skip_test("no git checkout: %s is not one (or git is missing)", P2PT_SOURCE_DIR);
    if (strcmp(out, "false") != 0)
        cr_skip_test("no full git history: %s is a shallow clone", P2PT_SOURCE_DIR);
    read_changelog();
    int links = 0;
    for (const char *line = text; line && *line; line = next_line(line)) {
        /* "[0.2.0]: ../../compare/A...B", "../../tree/A", "../../commit/A" */
        if (line[0] != '[' || strstr(line, "]: ../../") == NULL)
            continue;
        const char *url = strstr(line, "]: ../../") + 9;
        char rest[256];
        snprintf(rest, sizeof(rest), "%.*s", (int)strcspn(url, "\n"), url);
        char *rev = NULL;
        if (strncmp(rest, "compare/", 8) == 0)
            rev = rest + 8;
        else if (strncmp(rest, "tree/", 5) == 0)
            rev = rest + 5;
        else if (strncmp(rest, "commit/", 7) == 0)
            rev = rest + 7;
        cr_assert_not_null(rev, "CHANGELOG.md: a link of a kind this test does not know: %s", rest);
        char *dots = strstr(rev, "...");
        if (dots != NULL) {
            *dots = '\0';
            cr_expect(resolves(dots + 3), "CHANGELOG.md: '%s' does not resolve here (%s)",
                      dots + 3, rest);
        }
        cr_expect(resolves(rev), "CHANGELOG.md: '%s' does not resolve here", rev);
        links++;
    }
    cr_assert_gt(links, 0, "CHANGELOG.md has no link definitions");
}

Test(changelog, every_version_heading_has_a_link_definition)
{
    read_changelog();
    int headings = 0;
    for (const char *line = text; line && *line; line = next_line(line)) {
        if (strncmp(line, "## [", 4) != 0)
            continue;
        char def[80];
        snprintf(def, sizeof(def), "\n%.*s: ", (int)strcspn(line + 3, "]\n") + 1, line + 3);
        cr_expect(strstr(text, def) != NULL, "CHANGELOG.md: no link definition for %.*s",
                  (int)strcspn(line, "\n"), line);
        headings++;
    }
    cr_assert_gt(headings, 1, "CHANGELOG.md has no version headings");
}

Test(changelog, newest_release_is_the_headers_version)
{
    read_changelog();
    const char *line = text;
    while (line && (strncmp(line, "## [", 4) != 0 || strncmp(line, "## [Unreleased]", 15) == 0))
        line = next_line(line);
    cr_assert_not_null(line, "CHANGELOG.md has no released version");
    char version[32];
    snprintf(version, sizeof(version), "%.*s", (int)strcspn(line + 4, "]"), line + 4);
    cr_assert_str_eq(version, P2PT_VERSION_STRING,
                     "CHANGELOG.md's newest release differs from include/p2pt.h");
}
