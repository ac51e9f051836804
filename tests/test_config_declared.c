/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declared settings: a group of settings handed to the configuration (as the
 * engines' are, through p2pt__config_known) is read like the shared ones:
 * its defaults, the environment, then p2pt_init_args.options; a bad value is
 * status 4 naming where it came from, the value and what is accepted; its
 * check sees where each value came from; its names are known to the options
 * (with "did you mean"), to the misspelt-variable warning and to
 * p2pt__config_known_vars. The group here belongs to no engine: config reads
 * what it is handed, whoever owns it. Also: the default transport is the
 * fallback engine the caller names.
 * Criterion runs each test in its own process, so setenv is local to it.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

struct knobs {
    size_t bytes;
    int level;
    int fast;
};

static const struct p2pt_setting_word modes[] = {{"safe", 0}, {"fast", 1}, {NULL, 0}};

static const struct p2pt_setting knob_items[] = {
    {.name = "P2P_TRANSPORT_TEST_BYTES",
     .kind = P2PT_SETTING_SIZE,
     .offset = offsetof(struct knobs, bytes),
     .def = 4096,
     .min = 8,
     .max = 1u << 20,
     .multiple = 8,
     .multiple_why = "the test moves 8-byte words",
     .accepted = "a multiple of 8 from 8 to 1M bytes"},
    {.name = "P2P_TRANSPORT_TEST_LEVEL",
     .kind = P2PT_SETTING_INT,
     .offset = offsetof(struct knobs, level),
     .def = 2,
     .min = 1,
     .max = 9,
     .accepted = "an integer from 1 to 9"},
    {.name = "P2P_TRANSPORT_TEST_MODE",
     .kind = P2PT_SETTING_WORD,
     .offset = offsetof(struct knobs, fast),
     .def = 0,
     .words = modes,
     .accepted = "safe or fast (any case)"},
};

/* What no one value shows: bytes x level at most 64K, naming both sources. */
static p2pt_status knobs_check(const void *values, const char *const *from)
{
    const struct knobs *k = values;
    if (k->bytes * (size_t)k->level <= 65536)
        return P2PT_SUCCESS;
    return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s=%zu x %s=%d is over 65536", from[0], k->bytes,
                      from[1], k->level);
}

static const struct p2pt_settings knob_group = {
    .owner = "test",
    .items = knob_items,
    .n = 3,
    .size = sizeof(struct knobs),
    .check = knobs_check,
};

static struct p2pt_config cfg;
static struct p2pt_config_known known;
static int knob_slot;

/* The registry's engines and policies, and the test group after theirs. */
static void with_knobs(void)
{
    static const char *const vars[] = {"P2P_TRANSPORT", "P2P_TRANSPORT_TEST_BYTES",
                                       "P2P_TRANSPORT_TEST_LEVEL", "P2P_TRANSPORT_TEST_MODE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    p2pt__config_known(&known);
    knob_slot = known.n_groups++;
    known.groups[knob_slot] = &knob_group;
}

static p2pt_status parse(const char *options)
{
    return p2pt__config_parse(&cfg, options, NULL, &known);
}

static const struct knobs *knobs(void)
{
    return (const struct knobs *)cfg.settings[knob_slot].bytes;
}

static void expect_in_message(const char *what)
{
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, what) != NULL, "message lacks \"%s\": %s", what, msg);
}

TestSuite(config_declared, .init = with_knobs);

Test(config_declared, defaults_then_the_environment_then_the_options)
{
    cr_assert_eq(parse(NULL), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(knobs()->bytes, 4096);
    cr_assert_eq(knobs()->level, 2);
    cr_assert_eq(knobs()->fast, 0);
    setenv("P2P_TRANSPORT_TEST_LEVEL", "7", 1);
    setenv("P2P_TRANSPORT_TEST_MODE", "FAST", 1);
    setenv("P2P_TRANSPORT_TEST_BYTES", "8K", 1);
    cr_assert_eq(parse(NULL), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(knobs()->level, 7);
    cr_assert_eq(knobs()->fast, 1, "words are read in any case");
    cr_assert_eq(knobs()->bytes, 8192, "sizes take a suffix");
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_LEVEL=3, P2P_TRANSPORT_TEST_MODE=safe"), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    cr_assert_eq(knobs()->level, 3, "an options item beats the environment");
    cr_assert_eq(knobs()->fast, 0);
    cr_assert_eq(knobs()->bytes, 8192, "what the options do not name comes from the environment");
}

Test(config_declared, a_bad_value_names_its_source_the_value_and_what_is_accepted)
{
    setenv("P2P_TRANSPORT_TEST_LEVEL", "12", 1);
    cr_assert_eq(parse(NULL), P2PT_INVALID_ARGUMENT);
    expect_in_message("P2P_TRANSPORT_TEST_LEVEL=\"12\" is not valid: expected an integer from 1 "
                      "to 9");
    unsetenv("P2P_TRANSPORT_TEST_LEVEL");
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_MODE=slow"), P2PT_INVALID_ARGUMENT);
    expect_in_message("p2pt_init_args.options P2P_TRANSPORT_TEST_MODE=\"slow\"");
    expect_in_message("safe or fast (any case)");
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_BYTES=100"), P2PT_INVALID_ARGUMENT);
    expect_in_message("100 is not a multiple of 8 (the test moves 8-byte words)");
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_BYTES="), P2PT_INVALID_ARGUMENT);
    expect_in_message("p2pt_init_args.options P2P_TRANSPORT_TEST_BYTES is set but empty");
}

Test(config_declared, the_group_check_names_where_each_value_came_from)
{
    setenv("P2P_TRANSPORT_TEST_LEVEL", "9", 1);
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_BYTES=64K"), P2PT_INVALID_ARGUMENT);
    expect_in_message("p2pt_init_args.options P2P_TRANSPORT_TEST_BYTES=65536 x "
                      "P2P_TRANSPORT_TEST_LEVEL=9");
    unsetenv("P2P_TRANSPORT_TEST_LEVEL");
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_BYTES=64K"), P2PT_INVALID_ARGUMENT);
    expect_in_message("x P2P_TRANSPORT_TEST_LEVEL (default)=2");
}

Test(config_declared, a_near_miss_in_the_options_is_suggested)
{
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_LEVL=3"), P2PT_INVALID_ARGUMENT);
    expect_in_message("did you mean P2P_TRANSPORT_TEST_LEVEL?");
    expect_in_message("P2P_TRANSPORT_TEST_MODE"); /* the accepted names list it */
    /* Without the group the name is no setting at all. */
    known.n_groups--;
    cr_assert_eq(parse("P2P_TRANSPORT_TEST_LEVEL=3"), P2PT_INVALID_ARGUMENT);
    expect_in_message("\"P2P_TRANSPORT_TEST_LEVEL\" is not a p2pt setting");
}

static char warnings[2048];

static void capture(p2pt_log_level level, unsigned long flags, const char *file, int line,
                    const char *fmt, ...)
{
    (void)level, (void)flags, (void)file, (void)line;
    size_t used = strlen(warnings);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warnings + used, sizeof(warnings) - used, fmt, ap);
    va_end(ap);
}

Test(config_declared, a_misspelt_variable_is_warned_about_with_the_declared_name)
{
    struct p2pt_logger log = {capture, P2PT_LOG_WARN};
    setenv("P2P_TRANSPORT_TEST_LEVL", "3", 1);
    setenv("P2P_TRANSPORT_TEST_MODE", "fast", 1);
    p2pt__config_warn_unknown_env(&log, &known);
    cr_assert(strstr(warnings, "P2P_TRANSPORT_TEST_LEVL is set but p2pt reads no such variable "
                               "(did you mean P2P_TRANSPORT_TEST_LEVEL?") != NULL,
              "%s", warnings);
    cr_assert(strstr(warnings, "P2P_TRANSPORT_TEST_MODE ") == NULL,
              "a declared name is one p2pt reads: %s", warnings);
}

Test(config_declared, known_vars_lists_shared_engine_and_handed_in_names)
{
    const char *names[P2PT_CONFIG_VARS_MAX];
    size_t n = p2pt__config_known_vars(&known, names, P2PT_CONFIG_VARS_MAX);
    const char *want[] = {"P2P_TRANSPORT", "P2P_TRANSPORT_VALIDATE",
                          "P2P_TRANSPORT_CHUNK_BYTES" /* the TMA engine's */,
                          "P2P_TRANSPORT_TEST_LEVEL", "P2P_TRANSPORT_TEST_MODE"};
    for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
        bool found = false;
        for (size_t i = 0; i < n; i++)
            found = found || strcmp(names[i], want[w]) == 0;
        cr_expect(found, "%s is not among the %zu known variables", want[w], n);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            cr_expect(strcmp(names[i], names[j]) != 0, "%s is listed twice", names[i]);
}

Test(config_declared, the_default_transport_is_the_fallback_the_caller_names)
{
    cr_assert_eq(parse(NULL), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, p2pt__fallback_engine()->name);
    cr_assert_str_eq(cfg.fallback, p2pt__fallback_engine()->name);
    known.fallback = "tma";
    cr_assert_eq(parse(NULL), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, "tma");
    cr_assert_str_eq(cfg.fallback, "tma", "remedies name it too");
}
