/* SPDX-License-Identifier: Apache-2.0 */
/*
 * README.md as a newcomer reads it: short (at most 300 lines), the install
 * within its first 80 lines, table rows a screen can show (at most 200
 * characters), no commit hashes (the runs behind its figures are in
 * bench/RESULTS.md), and a link to python/README.md for the plain
 * p2pt.Handle API. No document tells a user to install p2pt from a package
 * index, which has no p2pt.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc_test.h"

#define README_MAX_LINES 300
#define INSTALL_BY_LINE 80
#define TABLE_LINE_MAX 200

/* Characters, not bytes: UTF-8 continuation bytes do not count. */
static size_t chars(const char *s, size_t bytes)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

Test(readme, is_short_with_the_install_near_the_top)
{
    const char *text = read_doc("README.md");
    int lines = 0, install = 0;
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        lines++;
        if (install == 0 && strncmp(l, "## Install", 10) == 0)
            install = lines;
    }
    cr_expect_leq(lines, README_MAX_LINES,
                  "README.md has %d lines, over %d: the long form belongs in docs/", lines,
                  README_MAX_LINES);
    cr_expect(install > 0 && install <= INSTALL_BY_LINE,
              "README.md's \"## Install\" heading is at line %d; it must be within the first %d",
              install, INSTALL_BY_LINE);
}

Test(readme, tables_fit_a_screen_and_name_no_commit)
{
    const char *text = read_doc("README.md");
    int line = 0;
    for (const char *l = text; *l;) {
        size_t len = strcspn(l, "\n");
        line++;
        if (l[0] == '|')
            cr_expect_leq(chars(l, len), TABLE_LINE_MAX,
                          "README.md:%d: a table row of %zu characters, over %d: %.60s...", line,
                          chars(l, len), TABLE_LINE_MAX, l);
        /* A word of 7 to 40 hex digits with a digit and a letter reads as
         * a commit: the provenance of a figure goes to bench/RESULTS.md. */
        for (size_t i = 0; i < len;) {
            size_t w = 0;
            bool digit = false, letter = false;
            while (i + w < len && isxdigit((unsigned char)l[i + w])) {
                digit = digit || isdigit((unsigned char)l[i + w]);
                letter = letter || islower((unsigned char)l[i + w]);
                w++;
            }
            bool word = (i == 0 || !isalnum((unsigned char)l[i - 1])) &&
                        (i + w == len || !isalnum((unsigned char)l[i + w]));
            cr_expect(!(word && w >= 7 && w <= 40 && digit && letter),
                      "README.md:%d names %.*s, which reads as a commit: say it in "
                      "bench/RESULTS.md",
                      line, (int)w, l + i);
            i += w ? w : 1;
        }
        l += len + (l[len] == '\n');
    }
}

Test(readme, links_the_python_package_readme)
{
    const char *text = read_doc("README.md");
    cr_expect(strstr(text, "](python/README.md)") != NULL,
              "README.md does not link python/README.md, where p2pt.Handle is documented");
    cr_expect(strstr(text, "p2pt.Handle") != NULL, "README.md never shows p2pt.Handle");
}

Test(readme, no_document_installs_p2pt_from_a_package_index)
{
    static const char *const docs[] = {"README.md", "python/README.md", "docs/USAGE.md",
                                       "docs/BUILD.md", "examples/kv_offload.py",
                                       "python/p2pt/torch/__init__.py"};
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        const char *text = read_doc(docs[i]), *hit = strstr(text, "pip install p2pt");
        cr_expect_null(hit,
                       "%s says \"%.40s\", but p2pt is on no package index: say pip install "
                       "\".[torch]\" from a checkout, or pip install torch",
                       docs[i], hit ? hit : "");
    }
}
