/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every source file of the tree says its license in an SPDX line near its
 * top (C, CUDA, headers, Python, shell, CMake), and the LICENSE file names
 * its copyright holder: a packager's license scanner finds both.
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>

#define TAG "SPDX-License-Identifier: Apache-2.0"

static int checked, missing;
static char first_missing[1024];

static bool is_source(const char *path)
{
    static const char *const ends[] = {".c", ".h", ".cu", ".cuh", ".py", ".sh", ".cmake",
                                       "CMakeLists.txt", ".toml"};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        size_t m = strlen(ends[i]);
        if (n >= m && strcmp(path + n - m, ends[i]) == 0)
            return true;
    }
    return false;
}

static int visit(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    /* Build trees, caches and results are not sources. */
    if (type == FTW_D && (strstr(path, "/build") || strstr(path, "/.") ||
                          strstr(path, "__pycache__") || strstr(path, "bench/results")))
        return FTW_SKIP_SUBTREE;
    if (type != FTW_F || !is_source(path))
        return FTW_CONTINUE;
    FILE *f = fopen(path, "r");
    char head[512] = "";
    size_t got = f ? fread(head, 1, sizeof(head) - 1, f) : 0;
    if (f)
        fclose(f);
    head[got] = '\0';
    checked++;
    if (strstr(head, TAG) == NULL && missing++ == 0)
        snprintf(first_missing, sizeof(first_missing), "%s", path);
    return FTW_CONTINUE;
}

Test(license, every_source_file_carries_an_spdx_line)
{
    static const char *const dirs[] = {"src", "include", "kernels", "tests", "bench", "support",
                                       "examples", "fuzz", "python", "scripts", "cmake"};
    char root[1024];
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(root, sizeof(root), "%s/%s", P2PT_SOURCE_DIR, dirs[i]);
        nftw(root, visit, 16, FTW_PHYS | FTW_ACTIONRETVAL);
    }
    snprintf(root, sizeof(root), "%s/CMakeLists.txt", P2PT_SOURCE_DIR);
    visit(root, NULL, FTW_F, NULL);
    cr_assert_gt(checked, 100, "only %d source files found under %s", checked, P2PT_SOURCE_DIR);
    cr_assert_eq(missing, 0, "%d of %d source files lack \"" TAG "\", the first: %s", missing,
                 checked, first_missing);
}

Test(license, the_license_names_its_copyright_holder)
{
    char path[1024], text[65536];
    snprintf(path, sizeof(path), "%s/LICENSE", P2PT_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_assert(strstr(text, "Copyright") != NULL && strstr(text, "The p2pt authors") != NULL,
              "LICENSE names no copyright holder");
}
