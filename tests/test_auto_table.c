/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `auto` crossover table: a table with comments, blank lines, CRLF
 * endings, tabs and bands of one list on lines apart parses to exactly the
 * bands written; pick() and band_of() at every band edge; every built-in
 * table parses and is for the architecture its entry names; format then
 * parse gives the same table back (built-ins, graph bands, a device, sizes
 * with no suffix); every kind of bad text is rejected with status 4, a
 * message naming the source, the line and the bad value, and the output
 * left as it was; files that cannot be read are rejected naming the path
 * and the reason; and lists built from measurements put each size with its
 * fastest engine, cut bands at the rounded geometric mean and ignore noise
 * within the tie margin. The pinned host memory lists (copy, graph and
 * batch for h2d and d2h) are optional: a table without them parses with
 * them empty, one with them reads and writes them like any other list, and
 * bad host lines are refused like bad lines of any other list.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auto_table.h"

static const char *const engines[] = {"ce", "tma"};
enum { CE, TMA };

#define HEAD "p2pt-auto 1\narch sm_90\n"
#define PATHS "copy local 0 ce\ncopy push 0 ce\ncopy pull 0 tma\n"
#define GOOD HEAD PATHS "batch 0 tma\n"

struct band_want {
    uint64_t from;
    uint32_t engine;
};

static void expect_list(const struct p2pt_auto_list *l, const char *name, uint32_t n,
                        const struct band_want *want)
{
    cr_assert_eq(l->n, n, "%s: %u bands, expected %u", name, l->n, n);
    for (uint32_t i = 0; i < n; i++) {
        cr_expect_eq(l->band[i].from, want[i].from, "%s band %u starts at %llu, expected %llu",
                     name, i, (unsigned long long)l->band[i].from,
                     (unsigned long long)want[i].from);
        cr_expect_eq(l->band[i].engine, want[i].engine, "%s band %u: engine %u, expected %u",
                     name, i, l->band[i].engine, want[i].engine);
    }
}
#define EXPECT_LIST(l, ...)                                                                  \
    expect_list((l), #l, P2PT_ARRAY_LEN(((struct band_want[]){__VA_ARGS__})),               \
                (struct band_want[]){__VA_ARGS__})

static bool same_list(const struct p2pt_auto_list *a, const struct p2pt_auto_list *b)
{
    if (a->n != b->n)
        return false;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->band[i].from != b->band[i].from || a->band[i].engine != b->band[i].engine)
            return false;
    return true;
}

/* Format `t`, parse the text, and compare everything but the source. */
static void expect_round_trip(const struct p2pt_auto_table *t, const char *what)
{
    char text[8192];
    size_t n = p2pt__auto_table_format(t, engines, text, sizeof(text));
    cr_assert_lt(n, sizeof(text), "%s: %zu bytes of text", what, n);
    cr_assert_eq(strlen(text), n, "%s: format returned %zu for %zu bytes", what, n,
                 strlen(text));
    struct p2pt_auto_table back;
    cr_assert_eq(p2pt__auto_table_parse(text, n, "formatted", engines, 2, &back), P2PT_SUCCESS,
                 "%s: %s\n%s", what, p2pt__last_error_text(), text);
    cr_expect_eq(back.cc, t->cc, "%s: cc %d, expected %d", what, back.cc, t->cc);
    cr_expect_str_eq(back.device, t->device, "%s", what);
    for (int p = 0; p < P2PT_AUTO_PATHS; p++) {
        cr_expect(same_list(&back.copy[p], &t->copy[p]), "%s: copy %s differs:\n%s", what,
                  p2pt__auto_path_names[p], text);
        cr_expect(same_list(&back.graph[p], &t->graph[p]), "%s: graph %s differs:\n%s", what,
                  p2pt__auto_path_names[p], text);
    }
    cr_expect(same_list(&back.batch, &t->batch), "%s: batch differs:\n%s", what, text);
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        cr_expect(same_list(&back.host_batch[i], &t->host_batch[i]),
                  "%s: batch %s differs:\n%s", what, p2pt__auto_path_names[P2PT_AUTO_H2D + i],
                  text);
}

/* Bad text: status 4, a message that begins "t.table:LINE: " (line 0:
 * "t.table: ") and holds every string of `also`, and `out` as it was. */
static void expect_bad_len(const char *text, size_t len, int line, const char *const *also)
{
    struct p2pt_auto_table t, pattern;
    memset(&pattern, 0xa5, sizeof(pattern));
    memcpy(&t, &pattern, sizeof(t));
    p2pt_status st = p2pt__auto_table_parse(text, len, "t.table", engines, 2, &t);
    const char *msg = p2pt__last_error_text();
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "status %d for:\n%.*s", (int)st, (int)len, text);
    char where[32];
    if (line > 0)
        snprintf(where, sizeof(where), "t.table:%d: ", line);
    else
        snprintf(where, sizeof(where), "t.table: ");
    cr_expect(strncmp(msg, where, strlen(where)) == 0, "message does not begin \"%s\": %s",
              where, msg);
    for (; *also != NULL; also++)
        cr_expect(strstr(msg, *also) != NULL, "message lacks \"%s\": %s", *also, msg);
    cr_expect(memcmp(&t, &pattern, sizeof(t)) == 0, "the table was written on failure");
}
#define EXPECT_BAD(text, line, ...)                                                          \
    expect_bad_len((text), strlen(text), (line), (const char *const[]){__VA_ARGS__, NULL})

Test(auto_table, comments_blanks_crlf_and_tabs_parse_to_the_bands_written)
{
    static const char text[] = "# calibrated by hand\r\n"
                               "\r\n"
                               "p2pt-auto 1   # format\r\n"
                               "arch\tsm_90\r\n"
                               "device \t NVIDIA H100 80GB HBM3  # the GPU\r\n"
                               "copy local 0 TMA\r\n"
                               "\t copy local 256K ce\t# from 256 KiB\r\n"
                               "copy push 0 ce\n"
                               "copy pull 0 tma\r\n"
                               "batch 0 tma\r\n"
                               "   \t\r\n"
                               "copy pull 32M Ce\r\n"
                               "graph push 0 tma\r\n"
                               "batch 64M ce\r\n"
                               "batch 1G tma\r\n"
                               "graph push 12345 ce\r\n"
                               "# no newline after the last line";
    struct p2pt_auto_table t;
    memset(&t, 0xa5, sizeof(t));
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t.table", engines, 2, &t),
                 P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_expect_eq(t.cc, 90);
    cr_expect_str_eq(t.device, "NVIDIA H100 80GB HBM3");
    cr_expect_str_eq(t.source, "t.table");
    EXPECT_LIST(&t.copy[P2PT_AUTO_LOCAL], {0, TMA}, {256 << 10, CE});
    EXPECT_LIST(&t.copy[P2PT_AUTO_PUSH], {0, CE});
    EXPECT_LIST(&t.copy[P2PT_AUTO_PULL], {0, TMA}, {32 << 20, CE});
    EXPECT_LIST(&t.graph[P2PT_AUTO_PUSH], {0, TMA}, {12345, CE});
    cr_expect_eq(t.graph[P2PT_AUTO_LOCAL].n, 0);
    cr_expect_eq(t.graph[P2PT_AUTO_PULL].n, 0);
    EXPECT_LIST(&t.batch, {0, TMA}, {64 << 20, CE}, {1ull << 30, TMA});
}

Test(auto_table, pick_and_band_of_at_every_band_edge)
{
    struct p2pt_auto_table t;
    static const char text[] = HEAD "copy local 0 tma\ncopy local 256K ce\ncopy push 0 ce\n"
                                    "copy pull 0 tma\nbatch 0 tma\nbatch 64M ce\nbatch 1G tma\n";
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t", engines, 2, &t), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    static const struct {
        int list; /* 0: copy local, 1: copy push, 2: batch */
        uint64_t bytes;
        uint32_t engine, band;
    } cases[] = {
        {0, 0, TMA, 0},
        {0, 1, TMA, 0},
        {0, (256 << 10) - 1, TMA, 0},
        {0, 256 << 10, CE, 1},
        {0, (256 << 10) + 1, CE, 1},
        {0, UINT64_MAX, CE, 1},
        {1, 0, CE, 0},
        {1, UINT64_MAX, CE, 0},
        {2, 0, TMA, 0},
        {2, (64 << 20) - 1, TMA, 0},
        {2, 64 << 20, CE, 1},
        {2, (64 << 20) + 1, CE, 1},
        {2, (1ull << 30) - 1, CE, 1},
        {2, 1ull << 30, TMA, 2},
        {2, (1ull << 30) + 1, TMA, 2},
        {2, 1ull << 62, TMA, 2},
        {2, UINT64_MAX, TMA, 2},
    };
    for (size_t i = 0; i < P2PT_ARRAY_LEN(cases); i++) {
        const struct p2pt_auto_list *l = cases[i].list == 0   ? &t.copy[P2PT_AUTO_LOCAL]
                                         : cases[i].list == 1 ? &t.copy[P2PT_AUTO_PUSH]
                                                              : &t.batch;
        cr_expect_eq(p2pt__auto_pick(l, cases[i].bytes), cases[i].engine,
                     "list %d, %llu bytes: engine %u, expected %u", cases[i].list,
                     (unsigned long long)cases[i].bytes, p2pt__auto_pick(l, cases[i].bytes),
                     cases[i].engine);
        cr_expect_eq(p2pt__auto_band_of(l, cases[i].bytes), cases[i].band,
                     "list %d, %llu bytes: band %u, expected %u", cases[i].list,
                     (unsigned long long)cases[i].bytes, p2pt__auto_band_of(l, cases[i].bytes),
                     cases[i].band);
    }
}

Test(auto_table, every_builtin_table_parses_for_its_architecture_and_round_trips)
{
    int count = 0;
    for (const struct p2pt_auto_builtin *b = p2pt__auto_builtins; b->text != NULL; b++) {
        char source[64];
        struct p2pt_auto_table t;
        snprintf(source, sizeof(source), "built-in %d", b->cc);
        cr_assert_eq(p2pt__auto_table_parse(b->text, strlen(b->text), source, engines, 2, &t),
                     P2PT_SUCCESS, "%s", p2pt__last_error_text());
        cr_expect_eq(t.cc, b->cc, "%s says sm_%d", source, t.cc);
        cr_expect_str_eq(t.source, source);
        for (int p = 0; p < P2PT_AUTO_GPU_PATHS; p++)
            cr_expect_gt(t.copy[p].n, 0);
        cr_expect_gt(t.batch.n, 0);
        expect_round_trip(&t, source);
        count++;
    }
    cr_expect_gt(count, 0, "no built-in table");
}

static void add_band(struct p2pt_auto_list *l, uint64_t from, uint32_t engine)
{
    l->band[l->n].from = from;
    l->band[l->n].engine = engine;
    l->n++;
}

Test(auto_table, format_writes_suffixes_where_exact_and_parses_back)
{
    struct p2pt_auto_table t;
    memset(&t, 0, sizeof(t));
    t.cc = 100;
    snprintf(t.device, sizeof(t.device), "NVIDIA B200\twith a tab");
    add_band(&t.copy[P2PT_AUTO_LOCAL], 0, CE);
    add_band(&t.copy[P2PT_AUTO_LOCAL], 12345, TMA);
    add_band(&t.copy[P2PT_AUTO_LOCAL], 1536 << 10, CE);
    add_band(&t.copy[P2PT_AUTO_LOCAL], 2048 << 10, TMA);
    add_band(&t.copy[P2PT_AUTO_LOCAL], 3ull << 30, CE);
    add_band(&t.copy[P2PT_AUTO_LOCAL], 1ull << 62, TMA);
    add_band(&t.graph[P2PT_AUTO_LOCAL], 0, TMA);
    add_band(&t.copy[P2PT_AUTO_PUSH], 0, CE);
    add_band(&t.copy[P2PT_AUTO_PULL], 0, TMA);
    add_band(&t.graph[P2PT_AUTO_PULL], 0, CE);
    add_band(&t.graph[P2PT_AUTO_PULL], 4097, TMA);
    add_band(&t.batch, 0, TMA);
    add_band(&t.batch, 1023, CE);
    static const char want[] = "p2pt-auto 1\n"
                               "arch sm_100\n"
                               "device NVIDIA B200\twith a tab\n"
                               "copy local 0 ce\n"
                               "copy local 12345 tma\n"
                               "copy local 1536K ce\n"
                               "copy local 2M tma\n"
                               "copy local 3G ce\n"
                               "copy local 4294967296G tma\n"
                               "graph local 0 tma\n"
                               "copy push 0 ce\n"
                               "copy pull 0 tma\n"
                               "graph pull 0 ce\n"
                               "graph pull 4097 tma\n"
                               "batch 0 tma\n"
                               "batch 1023 ce\n";
    char text[1024];
    size_t n = p2pt__auto_table_format(&t, engines, text, sizeof(text));
    cr_expect_str_eq(text, want);
    cr_expect_eq(n, strlen(want));
    expect_round_trip(&t, "hand-made table");

    /* Too small a buffer: the length needed, and a terminated prefix. */
    char small[20];
    cr_expect_eq(p2pt__auto_table_format(&t, engines, small, sizeof(small)), strlen(want));
    cr_expect_str_eq(small, "p2pt-auto 1\narch sm");
    cr_expect_eq(p2pt__auto_table_format(&t, engines, NULL, 0), strlen(want));
}

Test(auto_table, source_is_truncated_not_overrun)
{
    char source[400];
    memset(source, 's', sizeof(source) - 1);
    source[sizeof(source) - 1] = '\0';
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_parse(GOOD, strlen(GOOD), source, engines, 2, &t),
                 P2PT_SUCCESS);
    cr_expect_eq(strlen(t.source), sizeof(t.source) - 1);
    cr_expect_eq(strncmp(t.source, source, sizeof(t.source) - 1), 0);
}

Test(auto_table, largest_size_and_longest_line_are_accepted)
{
    char text[1024];
    char comment[P2PT_AUTO_MAX_LINE + 1];
    memset(comment, '#', P2PT_AUTO_MAX_LINE);
    comment[P2PT_AUTO_MAX_LINE] = '\0';
    snprintf(text, sizeof(text), "%s\r\n" GOOD "copy local 4294967296G tma\n", comment);
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t", engines, 2, &t), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    EXPECT_LIST(&t.copy[P2PT_AUTO_LOCAL], {0, CE}, {1ull << 62, TMA});
}

Test(auto_table, wrong_magic_is_rejected_naming_the_line)
{
    EXPECT_BAD("p2pt-table 1\narch sm_90\n", 1, "'p2pt-table'", "'p2pt-auto 1'");
    EXPECT_BAD("# a comment\n\n  arch sm_90\np2pt-auto 1\n", 3, "'arch'", "'p2pt-auto 1'");
}

Test(auto_table, another_version_is_rejected_saying_which_one_this_build_reads)
{
    EXPECT_BAD("# v2\np2pt-auto 2\narch sm_90\n" PATHS "batch 0 tma\n", 2, "'2'",
               "expected 1", "this build reads");
    EXPECT_BAD("p2pt-auto 01\n", 1, "'01'", "expected 1");
    EXPECT_BAD("p2pt-auto\n", 1, "got ''", "expected 1");
}

Test(auto_table, unknown_item_lists_the_items)
{
    EXPECT_BAD(HEAD "\ncpy local 0 ce\n", 4, "'cpy'",
               "p2pt-auto, arch, device, copy, graph, batch or link");
}

Test(auto_table, unknown_or_missing_path_lists_the_paths)
{
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy remote 0 ce\n", 4, "'remote'",
               "local, push, pull, h2d or d2h");
    EXPECT_BAD(HEAD "graph Local 0 ce\n", 3, "'Local'", "local, push, pull, h2d or d2h");
    EXPECT_BAD(HEAD "copy H2D 0 ce\n", 3, "'H2D'", "local, push, pull, h2d or d2h");
    EXPECT_BAD(HEAD "copy\n", 3, "missing path", "got ''");
}

Test(auto_table, unknown_or_missing_engine_lists_the_engines)
{
    EXPECT_BAD(HEAD "copy local 0 dma\n", 3, "'dma'", "ce, tma");
    EXPECT_BAD(HEAD "copy local 0 ce\nbatch 0\n", 4, "missing engine", "ce, tma");
}

Test(auto_table, size_junk_is_rejected_naming_the_value)
{
    EXPECT_BAD(HEAD "copy local 4Q ce\n", 3, "'4Q'", "K, M or G");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy local -1 ce\n", 4, "'-1'", "not a size");
    EXPECT_BAD(HEAD "copy local 0 ce\n\ncopy push\n", 5, "missing size", "got ''");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy local 1.5M ce\n", 4, "'1.5M'");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy local 4294967297G tma\n", 4, "'4294967297G'",
               "2^62");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy local 99999999999999999999 tma\n", 4,
               "'99999999999999999999'");
}

Test(auto_table, first_band_must_start_at_zero)
{
    EXPECT_BAD(HEAD "copy local 4K ce\n", 3, "'4K'", "first 'copy local' band", "expected 0");
    EXPECT_BAD(GOOD "graph pull 1 ce\n", 7, "'1'", "first 'graph pull' band");
}

Test(auto_table, band_must_start_after_the_one_before_in_its_own_list)
{
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy push 0 ce\ncopy local 0 tma\n", 5, "'0'",
               "line 3");
    /* Bands of one list lines apart: the order is the list's own. */
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy local 1M tma\ncopy pull 0 ce\n"
                    "copy pull 4M ce\ncopy local 512K ce\n",
               7, "'512K'", "line 4", "1M");
    EXPECT_BAD(HEAD PATHS "batch 0 tma\nbatch 64M ce\nbatch 65536K tma\n", 8, "'65536K'",
               "line 7");
}

/* Bands 1K .. 16K of `list` appended to `text`, engines alternating: with
 * its band at 0, one more than a list may hold. */
static void append_bands(char *text, size_t size, const char *list)
{
    for (int i = 1; i <= 16; i++) {
        size_t used = strlen(text);
        snprintf(text + used, size - used, "%s %dK %s\n", list, i, i % 2 ? "ce" : "tma");
    }
}

Test(auto_table, seventeen_bands_are_too_many)
{
    char text[2048] = HEAD PATHS "batch 0 tma\n";
    append_bands(text, sizeof(text), "batch");
    /* 16 bands are fine, */
    struct p2pt_auto_table t;
    size_t sixteen = strlen(text) - strlen("batch 16K tma\n");
    cr_assert_eq(p2pt__auto_table_parse(text, sixteen, "t", engines, 2, &t), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    cr_expect_eq(t.batch.n, 16);
    /* the 17th (line 22) is not. */
    EXPECT_BAD(text, 22, "'16K'", "at most 16");
}

Test(auto_table, arch_junk_is_rejected_naming_the_value)
{
    static const char *const junk[] = {"sm90", "sm_9", "gfx90", "sm_90a", "sm_1000",
                                       "sm_09", "SM_90", "sm_", "sm_9x"};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(junk); i++) {
        char text[128], value[32];
        snprintf(text, sizeof(text), "p2pt-auto 1\n# arch\narch %s\n" PATHS "batch 0 tma\n",
                 junk[i]);
        snprintf(value, sizeof(value), "'%s'", junk[i]);
        EXPECT_BAD(text, 3, value, "sm_90, sm_100, sm_120");
    }
    EXPECT_BAD("p2pt-auto 1\narch\n", 2, "got ''", "sm_90");
    EXPECT_BAD("p2pt-auto 1\narch sm_90 sm_100\n", 2, "'sm_100'", "trailing");
}

Test(auto_table, arch_forms_that_are_accepted)
{
    static const struct {
        const char *arch;
        int cc;
    } ok[] = {{"sm_90", 90}, {"sm_100", 100}, {"sm_120", 120}, {"sm_80", 80}, {"sm_103", 103}};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(ok); i++) {
        char text[128];
        struct p2pt_auto_table t;
        snprintf(text, sizeof(text), "p2pt-auto 1\narch %s\n" PATHS "batch 0 tma\n", ok[i].arch);
        cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t", engines, 2, &t),
                     P2PT_SUCCESS, "%s", p2pt__last_error_text());
        cr_expect_eq(t.cc, ok[i].cc, "%s read as %d", ok[i].arch, t.cc);
    }
}

Test(auto_table, items_given_twice_are_rejected)
{
    EXPECT_BAD("p2pt-auto 1\narch sm_90\n\narch sm_100\n", 4, "'arch'", "line 2");
    EXPECT_BAD(HEAD "device A\ndevice B\n", 4, "'device'", "line 3");
    EXPECT_BAD(HEAD "p2pt-auto 1\n", 3, "'p2pt-auto'", "line 1");
}

Test(auto_table, device_longer_than_95_characters_is_rejected)
{
    char text[512], name[97];
    memset(name, 'G', 96);
    name[96] = '\0';
    snprintf(text, sizeof(text), HEAD "device %.95s\n" PATHS "batch 0 tma\n", name);
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t", engines, 2, &t), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    cr_expect_eq(strlen(t.device), 95);
    snprintf(text, sizeof(text), HEAD "device %s\n" PATHS "batch 0 tma\n", name);
    EXPECT_BAD(text, 3, "too long", "GGGGGGGG", "95");
    EXPECT_BAD(HEAD "device   # none\n", 3, "missing device name");
}

Test(auto_table, missing_arch_copy_path_or_batch_is_rejected)
{
    EXPECT_BAD("p2pt-auto 1\n" PATHS "batch 0 tma\n", 0, "no 'arch' line");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy push 0 ce\nbatch 0 tma\n", 0,
               "no 'copy pull' bands", "local, push, pull");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy pull 0 ce\ngraph push 0 ce\nbatch 0 tma\n", 0,
               "no 'copy push' bands");
    EXPECT_BAD(HEAD PATHS, 0, "no 'batch' bands");
}

Test(auto_table, trailing_fields_are_rejected)
{
    EXPECT_BAD(HEAD "copy local 0 ce extra\n", 3, "'extra'", "trailing");
    EXPECT_BAD("p2pt-auto 1 beta\n", 1, "'beta'", "trailing");
    EXPECT_BAD(HEAD PATHS "batch 0 tma tma\n", 6, "'tma'", "trailing");
}

Test(auto_table, line_over_255_characters_is_rejected)
{
    char text[1024];
    char comment[P2PT_AUTO_MAX_LINE + 2];
    memset(comment, '#', P2PT_AUTO_MAX_LINE + 1);
    comment[P2PT_AUTO_MAX_LINE + 1] = '\0';
    snprintf(text, sizeof(text), HEAD "copy local 0 ce\n%s\n" PATHS "batch 0 tma\n", comment);
    EXPECT_BAD(text, 4, "too long", "256 characters", "at most 255");
}

Test(auto_table, nul_byte_is_rejected_naming_its_line)
{
    static const char text[] = GOOD "copy local 1M\0tma\n";
    expect_bad_len(text, sizeof(text) - 1, 7, (const char *const[]){"NUL", "column 14", NULL});
    static const char in_comment[] = "p2pt-auto 1\n# \0\n";
    expect_bad_len(in_comment, sizeof(in_comment) - 1, 2, (const char *const[]){"NUL", NULL});
}

Test(auto_table, empty_text_or_only_comments_is_rejected)
{
    expect_bad_len("", 0, 0, (const char *const[]){"empty", "'p2pt-auto 1'", NULL});
    expect_bad_len(NULL, 0, 0, (const char *const[]){"empty", NULL});
    EXPECT_BAD("# nothing\n\n   \r\n", 0, "no items", "'p2pt-auto 1'");
}

/* ------------------------------------------------------------ loading files */

static char *temp_file(const void *data, size_t len)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/p2pt-auto-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp");
    cr_assert_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

static void expect_load_fails(const char *path, const char *also)
{
    struct p2pt_auto_table t, pattern;
    memset(&pattern, 0x5a, sizeof(pattern));
    memcpy(&t, &pattern, sizeof(t));
    cr_assert_eq(p2pt__auto_table_load(path, engines, 2, &t), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_expect(strstr(msg, path) != NULL, "message lacks the path: %s", msg);
    cr_expect(strstr(msg, also) != NULL, "message lacks \"%s\": %s", also, msg);
    cr_expect(memcmp(&t, &pattern, sizeof(t)) == 0, "the table was written on failure");
}

/* A FIFO (or a terminal) named as the table is refused at once: opening it
 * for reading would wait for a writer, and p2pt_init with it. */
Test(auto_table, load_refuses_what_is_not_a_regular_file_without_waiting)
{
    char dir[] = "/tmp/p2pt-auto-fifo-XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/table", dir);
    cr_assert_eq(mkfifo(path, 0600), 0, "%s", strerror(errno));
    alarm(10); /* a hang fails this test, not the suite's time */
    expect_load_fails(path, "not a regular file");
    alarm(0);
    unlink(path);
    expect_load_fails(dir, "not a regular file");
    rmdir(dir);
}

Test(auto_table, load_reads_a_good_file_with_its_path_as_source)
{
    char *path = temp_file(GOOD, strlen(GOOD));
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_load(path, engines, 2, &t), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    cr_expect_str_eq(t.source, path);
    cr_expect_eq(t.cc, 90);
    EXPECT_LIST(&t.copy[P2PT_AUTO_PULL], {0, TMA});
    unlink(path);
}

Test(auto_table, load_reports_parse_errors_with_the_path_and_line)
{
    char *path = temp_file(HEAD "copy local 0 dma\n", strlen(HEAD "copy local 0 dma\n"));
    char where[80];
    snprintf(where, sizeof(where), "%s:3: ", path);
    expect_load_fails(path, where);
    expect_load_fails(path, "'dma'");
    unlink(path);
}

Test(auto_table, load_rejects_missing_directory_empty_and_oversized_files)
{
    expect_load_fails("/tmp/p2pt-auto-no-such-dir/none.table", "No such file");
    char dir[] = "/tmp/p2pt-auto-dir-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    expect_load_fails(dir, "directory");
    rmdir(dir);

    char *path = temp_file("", 0);
    expect_load_fails(path, "empty");
    unlink(path);

    /* Exactly the limit loads; one byte more does not. */
    char *big = malloc(P2PT_AUTO_MAX_TEXT + 1);
    cr_assert_not_null(big);
    memset(big, '\n', P2PT_AUTO_MAX_TEXT + 1);
    memcpy(big, GOOD, strlen(GOOD));
    path = temp_file(big, P2PT_AUTO_MAX_TEXT);
    struct p2pt_auto_table t;
    cr_expect_eq(p2pt__auto_table_load(path, engines, 2, &t), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    unlink(path);
    path = temp_file(big, P2PT_AUTO_MAX_TEXT + 1);
    expect_load_fails(path, "larger than 65536 bytes");
    unlink(path);
    free(big);
}

/* ------------------------------------------- lists built from measurements */

#define N_ENGINES 2

static struct p2pt_auto_list built;

static p2pt_status build(const uint64_t *sizes, int n, const double *time, double tie)
{
    return p2pt__auto_list_build(&built, sizes, n, time, N_ENGINES, tie);
}

Test(auto_table, build_single_winner_is_one_band)
{
    const uint64_t sizes[] = {4096, 65536, 1 << 20, 16 << 20};
    const double time[] = {1, 2, 10, 20, 100, 200, 1000, 2000};
    cr_assert_eq(build(sizes, 4, time, 0.02), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, CE});
}

Test(auto_table, build_crossover_starts_at_the_rounded_geometric_mean)
{
    /* tma wins to 256K, ce from 1M: sqrt(256K * 1M) = 512K. */
    const uint64_t sizes[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
    const double time[] = {5, 3, 10, 8, 20, 30, 60, 90};
    cr_assert_eq(build(sizes, 4, time, 0.02), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA}, {512 << 10, CE});

    /* sqrt(100000 * 300000) = 173205.08..., up to 4 KiB: 43 * 4096. */
    const uint64_t odd[] = {100000, 300000};
    const double t2[] = {2, 1, 1, 2};
    cr_assert_eq(build(odd, 2, t2, 0), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA}, {43 * 4096, CE});

    /* From size 0 the boundary is still above 0. */
    const uint64_t zero[] = {0, 8192};
    cr_assert_eq(build(zero, 2, t2, 0), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA}, {4096, CE});

    /* Huge sizes: exact, no overflow. */
    const uint64_t huge[] = {1ull << 40, 1ull << 62};
    cr_assert_eq(build(huge, 2, t2, 0), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA}, {1ull << 51, CE});
}

Test(auto_table, build_ties_within_the_margin_keep_the_previous_engine)
{
    const uint64_t sizes[] = {1 << 20, 2 << 20, 4 << 20, 8 << 20};
    /* ce first; tma 1 % faster at 2M (noise), 1.5 % at 4M, 10 % at 8M. */
    const double time[] = {100, 110, 100, 99, 100, 98.5, 100, 90};
    cr_assert_eq(build(sizes, 4, time, 0.02), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    /* sqrt(4M * 8M) = 5931641.6, up to 4 KiB: 1449 * 4096. */
    EXPECT_LIST(&built, {0, CE}, {1449 * 4096, TMA});
    /* Without a margin the 1 % is enough: sqrt(1M * 2M) -> 363 * 4096. */
    cr_assert_eq(build(sizes, 4, time, 0), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, CE}, {363 * 4096, TMA});
    /* Exactly equal: the previous one stays even with no margin. */
    const double equal[] = {2, 1, 1, 1, 1, 1};
    cr_assert_eq(build(sizes, 3, equal, 0), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA});
}

Test(auto_table, build_never_picks_an_unmeasured_engine)
{
    const uint64_t sizes[] = {4096, 8192, 16384};
    const double time[] = {0, 50, -1, 50, NAN, 50};
    cr_assert_eq(build(sizes, 3, time, 0.02), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA});
    /* The previous engine unmeasured is no reason to keep it. */
    const double gap[] = {1, 2, 0, 2, 1, 2};
    cr_assert_eq(build(sizes, 3, gap, 0.5), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, CE}, {8192, TMA}, {12288, CE});
}

static void expect_build_fails(const uint64_t *sizes, int n, const double *time,
                               const char *also)
{
    struct p2pt_auto_list pattern;
    memset(&pattern, 0x77, sizeof(pattern));
    memcpy(&built, &pattern, sizeof(built));
    cr_assert_eq(build(sizes, n, time, 0.02), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_expect(strstr(msg, also) != NULL, "message lacks \"%s\": %s", also, msg);
    cr_expect(memcmp(&built, &pattern, sizeof(built)) == 0, "the list was written on failure");
}

Test(auto_table, build_rejects_bad_measurements)
{
    const uint64_t down[] = {8192, 4096};
    const uint64_t same[] = {4096, 4096};
    const double time[] = {1, 2, 1, 2, 1, 2};
    expect_build_fails(down, 2, time, "not increasing");
    expect_build_fails(same, 2, time, "not increasing");
    expect_build_fails(down, 0, time, "nothing measured");
    const uint64_t ok[] = {4096, 8192, 16384};
    const double none[] = {1, 2, 0, -3, 1, 2};
    expect_build_fails(ok, 3, none, "no engine measured at 8192 bytes");
    const uint64_t over[] = {4096, (1ull << 62) + 1};
    expect_build_fails(over, 2, time, "2^62");
}

Test(auto_table, build_allows_16_bands_and_rejects_more)
{
    uint64_t sizes[17];
    double time[17 * N_ENGINES];
    for (int i = 0; i < 17; i++) {
        sizes[i] = 4096ull << (2 * i);
        time[i * N_ENGINES + CE] = i % 2 ? 1 : 2;
        time[i * N_ENGINES + TMA] = i % 2 ? 2 : 1;
    }
    cr_assert_eq(build(sizes, 16, time, 0.02), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_expect_eq(built.n, 16);
    cr_expect_eq(built.band[1].from, 8192); /* sqrt(4K * 16K) */
    expect_build_fails(sizes, 17, time, "at most 16");
}

Test(auto_table, build_drops_a_band_with_no_room_between_two_changes)
{
    /* tma, ce, tma at 1, 2 and 3 bytes: both changes round up to 4096, so
     * ce's band is empty and tma's continues. */
    const uint64_t sizes[] = {1, 2, 3};
    const double time[] = {2, 1, 1, 2, 2, 1};
    cr_assert_eq(build(sizes, 3, time, 0), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&built, {0, TMA});
}

Test(auto_table, built_lists_round_trip_through_the_text)
{
    uint64_t sizes[12];
    double time[12 * N_ENGINES];
    for (int i = 0; i < 12; i++) {
        sizes[i] = 1000ull * (1ull << (3 * i)) + 7;
        time[i * N_ENGINES + CE] = (i / 3) % 2 ? 1 : 2;
        time[i * N_ENGINES + TMA] = (i / 3) % 2 ? 2 : 1;
    }
    struct p2pt_auto_table t;
    memset(&t, 0, sizeof(t));
    t.cc = 90;
    for (int p = 0; p < P2PT_AUTO_PATHS; p++)
        cr_assert_eq(p2pt__auto_list_build(&t.copy[p], sizes + p, 12 - p, time + 2 * p,
                                           N_ENGINES, 0.02),
                     P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(p2pt__auto_list_build(&t.batch, sizes, 12, time, N_ENGINES, 0.02),
                 P2PT_SUCCESS);
    cr_expect_eq(t.batch.n, 4);
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        cr_assert_eq(p2pt__auto_list_build(&t.host_batch[i], sizes + i, 6, time + 2 * i,
                                           N_ENGINES, 0.02),
                     P2PT_SUCCESS, "%s", p2pt__last_error_text());
    expect_round_trip(&t, "built table");
}

/* ------------------------------------------- pinned host memory lists */

Test(auto_table, host_lines_parse_to_the_bands_written_in_any_order)
{
    static const char text[] = HEAD "batch h2d 0 TMA\n"
                                    "copy local 0 tma\n"
                                    "copy h2d 0 tma\n"
                                    "copy d2h 0 ce  # copy engine\n"
                                    "copy push 0 ce\n"
                                    "batch d2h 0 ce\n"
                                    "copy h2d 1M ce\n"
                                    "graph h2d 0 ce\n"
                                    "\tbatch  d2h\t64K tma\n"
                                    "copy pull 0 tma\n"
                                    "batch 0 tma\n"
                                    "batch h2d 4M ce\n";
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t.table", engines, 2, &t),
                 P2PT_SUCCESS, "%s", p2pt__last_error_text());
    EXPECT_LIST(&t.copy[P2PT_AUTO_H2D], {0, TMA}, {1 << 20, CE});
    EXPECT_LIST(&t.copy[P2PT_AUTO_D2H], {0, CE});
    EXPECT_LIST(&t.graph[P2PT_AUTO_H2D], {0, CE});
    cr_expect_eq(t.graph[P2PT_AUTO_D2H].n, 0);
    EXPECT_LIST(&t.batch, {0, TMA});
    EXPECT_LIST(&t.host_batch[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_H2D)], {0, TMA}, {4 << 20, CE});
    EXPECT_LIST(&t.host_batch[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_D2H)], {0, CE}, {64 << 10, TMA});
    expect_round_trip(&t, "host lines");
}

Test(auto_table, a_table_without_host_lines_leaves_the_host_lists_empty)
{
    struct p2pt_auto_table t;
    memset(&t, 0xa5, sizeof(t));
    cr_assert_eq(p2pt__auto_table_parse(GOOD, strlen(GOOD), "t", engines, 2, &t), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    for (int p = P2PT_AUTO_H2D; p < P2PT_AUTO_PATHS; p++) {
        cr_expect_eq(t.copy[p].n, 0, "copy %s", p2pt__auto_path_names[p]);
        cr_expect_eq(t.graph[p].n, 0, "graph %s", p2pt__auto_path_names[p]);
    }
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        cr_expect_eq(t.host_batch[i].n, 0, "batch %s", p2pt__auto_path_names[P2PT_AUTO_H2D + i]);
    /* and writes none back: the text is the same lines as before. */
    char text[512];
    p2pt__auto_table_format(&t, engines, text, sizeof(text));
    cr_expect_str_eq(text, GOOD);
}

Test(auto_table, format_writes_host_lines_after_their_kind)
{
    struct p2pt_auto_table t;
    static const char text[] = GOOD "copy d2h 0 ce\ncopy h2d 0 tma\ngraph d2h 0 tma\n"
                                    "batch d2h 0 tma\nbatch d2h 8K ce\nbatch h2d 0 tma\n";
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t", engines, 2, &t), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    char out[1024];
    p2pt__auto_table_format(&t, engines, out, sizeof(out));
    cr_expect_str_eq(out, HEAD "copy local 0 ce\ncopy push 0 ce\ncopy pull 0 tma\n"
                               "copy h2d 0 tma\ncopy d2h 0 ce\ngraph d2h 0 tma\n"
                               "batch 0 tma\nbatch h2d 0 tma\nbatch d2h 0 tma\n"
                               "batch d2h 8K ce\n");
}

Test(auto_table, bad_host_lines_are_rejected_naming_the_line_and_what_was_expected)
{
    EXPECT_BAD(GOOD "copy h2d 0 dma\n", 7, "'dma'", "ce, tma");
    EXPECT_BAD(GOOD "copy d2h\n", 7, "missing size", "'copy d2h'");
    EXPECT_BAD(GOOD "copy d2h 4K ce\n", 7, "'4K'", "first 'copy d2h' band", "expected 0");
    EXPECT_BAD(GOOD "copy h2d 0 ce extra\n", 7, "'extra'", "trailing");
    EXPECT_BAD(GOOD "batch h2d\n", 7, "missing size", "'batch h2d'");
    EXPECT_BAD(GOOD "batch h2d 0\n", 7, "missing engine", "ce, tma");
    EXPECT_BAD(GOOD "batch d2h 1 ce\n", 7, "'1'", "first 'batch d2h' band");
    EXPECT_BAD(GOOD "batch d2h 0 ce\nbatch d2h 1.5K tma\n", 8, "'1.5K'", "not a size");
    EXPECT_BAD(GOOD "batch h2d 0 ce\nbatch h2d 0 tma\n", 8, "'batch h2d' band",
               "line 7", "more than 0");
    EXPECT_BAD(GOOD "batch pinned 0 ce\n", 7, "unknown batch list", "'pinned'",
               "h2d or d2h");
    EXPECT_BAD(GOOD "batch H2D 0 ce\n", 7, "unknown batch list", "'H2D'");
    EXPECT_BAD(GOOD "batch -4K ce\n", 7, "'-4K'", "not a size");
    /* A graph list refines a copy list: alone it is refused, on its line. */
    EXPECT_BAD(GOOD "graph h2d 0 tma\ngraph h2d 4K ce\n", 8, "'graph h2d' bands",
               "no 'copy h2d' bands", "'copy h2d 0 ce'");
    /* The host lists do not stand for the required ones. */
    EXPECT_BAD(HEAD PATHS "batch h2d 0 tma\nbatch d2h 0 tma\n", 0, "no 'batch' bands");
    EXPECT_BAD(HEAD "copy local 0 ce\ncopy push 0 ce\ncopy h2d 0 ce\ncopy d2h 0 ce\n"
                    "batch 0 tma\n",
               0, "no 'copy pull' bands", "h2d and d2h may have none");
}

Test(auto_table, host_batch_lists_have_their_own_band_order_and_limit)
{
    char text[2048] = GOOD "batch 64M ce\nbatch h2d 0 tma\n";
    append_bands(text, sizeof(text), "batch h2d");
    struct p2pt_auto_table t;
    size_t sixteen = strlen(text) - strlen("batch h2d 16K tma\n");
    cr_assert_eq(p2pt__auto_table_parse(text, sixteen, "t", engines, 2, &t), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    cr_expect_eq(t.host_batch[0].n, 16);
    EXPECT_LIST(&t.batch, {0, TMA}, {64 << 20, CE});
    EXPECT_BAD(text, 24, "'16K'", "too many 'batch h2d' bands", "at most 16");
}

/* ---------------------------------------------------- host link CTAs */

Test(auto_table, link_lines_give_the_ctas_of_each_direction_and_round_trip)
{
    static const char text[] = GOOD "link d2h 2\nlink h2d 8\n";
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_parse(text, strlen(text), "t", engines, 2, &t), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    cr_expect_eq(t.link[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_H2D)], 8);
    cr_expect_eq(t.link[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_D2H)], 2);
    char out[1024];
    p2pt__auto_table_format(&t, engines, out, sizeof(out));
    cr_expect(strstr(out, "link h2d 8\nlink d2h 2\n") != NULL, "%s", out);
    expect_round_trip(&t, "link lines");
    /* Absent: no cap. */
    cr_assert_eq(p2pt__auto_table_parse(GOOD, strlen(GOOD), "t", engines, 2, &t), P2PT_SUCCESS);
    cr_expect_eq(t.link[0], 0);
    cr_expect_eq(t.link[1], 0);
}

Test(auto_table, bad_link_lines_are_rejected_naming_the_value)
{
    EXPECT_BAD(GOOD "link local 4\n", 7, "'local'", "h2d, d2h or peer");
    EXPECT_BAD(GOOD "link\n", 7, "link direction", "h2d, d2h or peer");
    EXPECT_BAD(GOOD "link peer 0\n", 7, "'0'", "1 to 4096");
    EXPECT_BAD(GOOD "link h2d\n", 7, "link h2d CTAs", "1 to 4096");
    EXPECT_BAD(GOOD "link h2d 0\n", 7, "'0'", "1 to 4096");
    EXPECT_BAD(GOOD "link d2h 4097\n", 7, "'4097'", "1 to 4096");
    EXPECT_BAD(GOOD "link d2h 2x\n", 7, "'2x'", "1 to 4096");
    EXPECT_BAD(GOOD "link h2d 8\nlink d2h 3\nlink h2d 2\n", 9, "'link h2d' given twice",
               "the one on line 7");
    EXPECT_BAD(GOOD "link d2h -2\n", 7, "'-2'", "1 to 4096");
    EXPECT_BAD(GOOD "link d2h 2 4\n", 7, "'4'", "trailing");
}

Test(auto_table, builtin_tables_cap_host_link_kernels)
{
    for (int i = 0; p2pt__auto_builtins[i].text != NULL; i++) {
        const struct p2pt_auto_builtin *b = &p2pt__auto_builtins[i];
        struct p2pt_auto_table t;
        cr_assert_eq(p2pt__auto_table_parse(b->text, strlen(b->text), "b", engines, 2, &t),
                     P2PT_SUCCESS, "%s", p2pt__last_error_text());
        cr_expect(t.link[0] >= 1 && t.link[0] <= 32, "built-in %d: link h2d %u", i, t.link[0]);
        cr_expect(t.link[1] >= 1 && t.link[1] <= 32, "built-in %d: link d2h %u", i, t.link[1]);
        cr_expect(t.link[P2PT_LINK_PEER] >= 1 && t.link[P2PT_LINK_PEER] <= 32,
                  "built-in %d: link peer %u (at most 32 CTAs for peer pieces)", i,
                  t.link[P2PT_LINK_PEER]);
    }
}

Test(auto_table, a_peer_link_line_is_read_and_written_back)
{
    struct p2pt_auto_table t;
    cr_assert_eq(p2pt__auto_table_parse(GOOD "link peer 24\n", strlen(GOOD "link peer 24\n"), "t",
                                        engines, 2, &t),
                 P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(t.link[P2PT_LINK_PEER], 24);
    cr_assert_eq(t.link[P2PT_LINK_H2D], 0);
    char text[4096];
    p2pt__auto_table_format(&t, engines, text, sizeof(text));
    cr_assert(strstr(text, "link peer 24\n") != NULL, "%s", text);
}
