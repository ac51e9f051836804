/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every source file of the tree says its license in an SPDX line near its
 * top (C, CUDA, headers, Python, shell, CMake), and the LICENSE file names
 * its copyright holder: a packager's license scanner finds both.
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG "SPDX-License-Identifier: Apache-2.0"

static int checked, missing;
static char first_missing[1024];

/*
 * The build folders that this project's scripts and this build made, as
 * real paths: only they are skipped. Nothing is judged by the characters of
 * the checkout's own location, which may be a hidden folder or one named
 * "builds" (the tree is walked by paths relative to its root).
 */
static char skip_dirs[16][PATH_MAX];
static int n_skip;

static void add_skip(const char *dir, const char *leaf)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s%s%s", dir, leaf ? "/" : "", leaf ? leaf : "");
    if (n_skip < 16 && realpath(path, skip_dirs[n_skip]) != NULL)
        n_skip++;
}

static void find_build_dirs(void)
{
    static const char *const made[] = {"build", "build-asan", "build-fuzz", "build-python",
                                       "build-bench"};
    const char *env = getenv("P2PT_BUILD_ROOT");
    char root[PATH_MAX] = "";
    if (env && *env) /* a relative one is read from the source root, as scripts/test.sh does */
        snprintf(root, sizeof(root), "%s%s%s", env[0] == '/' ? "" : P2PT_SOURCE_DIR,
                 env[0] == '/' ? "" : "/", env);
    n_skip = 0;
    add_skip(P2PT_BINARY_DIR, NULL);
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        add_skip(P2PT_SOURCE_DIR, made[i]);
        if (root[0])
            add_skip(root, made[i]);
    }
}

static bool is_build_dir(const char *path)
{
    char real[PATH_MAX];
    if (realpath(path, real) == NULL)
        return false;
    for (int i = 0; i < n_skip; i++)
        if (strcmp(real, skip_dirs[i]) == 0)
            return true;
    return false;
}

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

/* path is relative to the source root (the walk runs from there). */
static int visit(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    /* Measured results are data, Python's byte code is not a source. */
    if (type == FTW_D && (strcmp(path, "bench/results") == 0 ||
                          strcmp(path + ftw->base, "__pycache__") == 0 || is_build_dir(path)))
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
    find_build_dirs();
    /* Criterion runs each test in its own process: the chdir is local to it. */
    cr_assert_eq(chdir(P2PT_SOURCE_DIR), 0, "cannot enter %s", P2PT_SOURCE_DIR);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        nftw(dirs[i], visit, 16, FTW_PHYS | FTW_ACTIONRETVAL);
    struct FTW top = {.base = 0, .level = 0};
    visit("CMakeLists.txt", NULL, FTW_F, &top);
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
