/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the tests of the documents share (test_docs.c, test_readme.c): a
 * document of the source tree read whole. Static inline so each test file
 * stays self-contained.
 */
#ifndef P2PT_DOC_TEST_H
#define P2PT_DOC_TEST_H

#include <criterion/criterion.h>
#include <stdio.h>

/* The text of `name` (a path under the source root), NUL-ended, in one of
 * four rotating buffers of 256 KiB. */
static inline char *read_doc(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", P2PT_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    static char text[4][256 * 1024];
    static int next;
    char *buf = text[next++ % 4];
    size_t n = fread(buf, 1, sizeof(text[0]) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

#endif
