/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration: defaults; P2P_TRANSPORT case-insensitive; every bad value
 * (unknown name, empty, junk, out of range, chunk not a multiple of 16, a
 * ring over 227 KiB) rejected with status 4 and a message naming the
 * variable, the value and what is accepted; the init argument beats the
 * environment; p2pt_init_args.options override the environment per handle
 * and are checked the same way; and init reports a bad transport before it
 * looks for a driver. A misspelt name, in the environment or the options,
 * and a misspelt transport, wherever it is given, get the same "did you
 * mean" from the one suggestion config makes, or none when nothing is near.
 * Also: the version string is the numbers CMake read.
 * Criterion runs each test in its own process, so setenv is local to it.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"
#include "p2pt_plugin.h"

static struct p2pt_config cfg;

/* The TMA engine's settings as the last read left them (its group). */
static const struct p2pt_tma_settings *tma(void)
{
    return p2pt__tma_settings_in(&cfg);
}

static p2pt_status read_with(const char *var, const char *value)
{
    setenv(var, value, 1);
    return p2pt__config_read(&cfg, NULL, NULL);
}

static void expect_rejected(const char *var, const char *value, const char *also)
{
    p2pt_status st = read_with(var, value);
    const char *msg = p2pt__last_error_text();
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "%s=\"%s\" -> %d", var, value, (int)st);
    cr_assert(strstr(msg, var) != NULL, "message lacks the variable: %s", msg);
    if (value[0] != '\0')
        cr_assert(strstr(msg, value) != NULL, "message lacks the value: %s", msg);
    if (also != NULL)
        cr_assert(strstr(msg, also) != NULL, "message lacks \"%s\": %s", also, msg);
    unsetenv(var);
}

/* The GPU runs set P2P_TRANSPORT for the whole binary: every test here
 * starts from an empty p2pt environment. */
static void clean_environment(void)
{
    static const char *const vars[] = {
        "P2P_TRANSPORT", "P2P_TRANSPORT_LOG", "P2P_TRANSPORT_CHUNK_BYTES",
        "P2P_TRANSPORT_STAGES", "P2P_TRANSPORT_MAX_CTAS", "P2P_TRANSPORT_VALIDATE",
        "P2P_TRANSPORT_L2_HINT", "P2P_CUDA_LIBRARY", "P2P_NVRTC_LIBRARY",
        "P2P_TRANSPORT_CACHE_DIR", "P2P_TRANSPORT_PDL"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

TestSuite(config, .init = clean_environment);

Test(config, defaults_without_environment)
{
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_expect_str_eq(cfg.transport, "ce");
    cr_expect_eq(tma()->chunk_bytes, 49152);
    cr_expect(tma()->stages >= 1 && tma()->stages <= 16);
    cr_expect_eq(tma()->launch.max_ctas, 0);
    cr_expect_eq(cfg.validate, 1);
    cr_expect_eq(cfg.log_level, P2PT_LOG_WARN);
    cr_expect_str_eq(cfg.cuda_library, "libcuda.so.1");
    cr_expect(p2pt__tma_smem_bytes(tma()) <= P2PT_CHUNK_MAX);
}

Test(config, transport_names_are_case_insensitive)
{
    const char *ok[][2] = {{"tma", "tma"}, {"TMA", "tma"}, {"Ce", "ce"}, {"cE", "ce"}};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(read_with("P2P_TRANSPORT", ok[i][0]), P2PT_SUCCESS, "%s", ok[i][0]);
        cr_assert_str_eq(cfg.transport, ok[i][1]);
    }
}

Test(config, unknown_transport_names_the_variable_value_and_choices)
{
    expect_rejected("P2P_TRANSPORT", "bogus", "ce, tma");
    read_with("P2P_TRANSPORT", "bogus");
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "\"bogus\"") && strstr(msg, "ce") && strstr(msg, "tma"), "%s", msg);
    expect_rejected("P2P_TRANSPORT", "tma ", NULL);
    expect_rejected("P2P_TRANSPORT", "cee", NULL);
    expect_rejected("P2P_TRANSPORT", "t", NULL);
}

Test(config, empty_values_are_refused)
{
    expect_rejected("P2P_TRANSPORT", "", "empty");
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "", "empty");
    expect_rejected("P2P_TRANSPORT_LOG", "", "empty");
}

Test(config, init_argument_overrides_the_environment)
{
    setenv("P2P_TRANSPORT", "ce", 1);
    cr_assert_eq(p2pt__config_read(&cfg, NULL, "TMA"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, "tma");
    cr_assert_eq(p2pt__config_read(&cfg, NULL, "nope"), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "p2pt_init_args.transport") != NULL);
}

Test(config, chunk_bytes_accepts_multiples_of_16_with_suffixes)
{
    cr_assert_eq(read_with("P2P_TRANSPORT_CHUNK_BYTES", "32K"), P2PT_SUCCESS);
    cr_assert_eq(tma()->chunk_bytes, 32768);
    cr_assert_eq(read_with("P2P_TRANSPORT_CHUNK_BYTES", "16"), P2PT_SUCCESS);
    cr_assert_eq(tma()->chunk_bytes, 16);
}

Test(config, bad_chunk_bytes_are_rejected_with_the_value)
{
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "1000", "multiple of 16");
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "0", NULL);
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "abc", NULL);
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "-16", NULL);
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "48K junk", NULL);
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "1M", "232448");
    expect_rejected("P2P_TRANSPORT_CHUNK_BYTES", "99999999999999999999999", NULL);
}

Test(config, stages_and_cta_caps_have_limits)
{
    expect_rejected("P2P_TRANSPORT_STAGES", "0", "1 to 16");
    expect_rejected("P2P_TRANSPORT_STAGES", "17", "1 to 16");
    cr_assert_eq(read_with("P2P_TRANSPORT_STAGES", "2"), P2PT_SUCCESS);
    cr_assert_eq(tma()->stages, 2);
    expect_rejected("P2P_TRANSPORT_MAX_CTAS", "4097", "4096");
    cr_assert_eq(read_with("P2P_TRANSPORT_MAX_CTAS", "32"), P2PT_SUCCESS);
    cr_assert_eq(tma()->launch.max_ctas, 32);
}

Test(config, a_ring_over_227k_names_both_values_and_the_limit)
{
    setenv("P2P_TRANSPORT_CHUNK_BYTES", "64K", 1);
    setenv("P2P_TRANSPORT_STAGES", "4", 1);
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "65536") && strstr(msg, "=4") && strstr(msg, "232448"), "%s", msg);
}

Test(config, a_ring_over_227k_says_which_values_came_from_the_options_string)
{
    setenv("P2P_TRANSPORT_STAGES", "4", 1);
    cr_assert_eq(p2pt__config_read(&cfg, "P2P_TRANSPORT_CHUNK_BYTES=64K", NULL),
                 P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "p2pt_init_args.options P2P_TRANSPORT_CHUNK_BYTES=65536") &&
                  strstr(msg, " P2P_TRANSPORT_STAGES=4"),
              "%s", msg);
    unsetenv("P2P_TRANSPORT_STAGES");
    cr_assert_eq(p2pt__config_read(&cfg, "P2P_TRANSPORT_CHUNK_BYTES=64K", NULL),
                 P2PT_INVALID_ARGUMENT);
    msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "P2P_TRANSPORT_STAGES (default)=4"), "%s", msg);
}

Test(config, a_ring_of_exactly_227k_fits_and_16_bytes_more_does_not)
{
    setenv("P2P_TRANSPORT_STAGES", "2", 1);
    setenv("P2P_TRANSPORT_CHUNK_BYTES", "116224", 1); /* 2 x 116224 = 232448 */
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(p2pt__tma_smem_bytes(tma()), 232448);
    setenv("P2P_TRANSPORT_CHUNK_BYTES", "116240", 1);
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "116240") && strstr(msg, "=2") && strstr(msg, "232448"), "%s", msg);
    setenv("P2P_TRANSPORT_CHUNK_BYTES", "227K", 1);
    setenv("P2P_TRANSPORT_STAGES", "1", 1);
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(tma()->chunk_bytes, 232448);
}

Test(config, log_levels_by_name_or_number)
{
    const char *names[] = {"none", "WARN", "Info", "trace", "version", "3"};
    const int levels[] = {P2PT_LOG_NONE, P2PT_LOG_WARN, P2PT_LOG_INFO, P2PT_LOG_TRACE,
                          P2PT_LOG_VERSION, 3};
    for (size_t i = 0; i < 6; i++) {
        cr_assert_eq(read_with("P2P_TRANSPORT_LOG", names[i]), P2PT_SUCCESS, "%s", names[i]);
        cr_assert_eq(cfg.log_level, levels[i], "%s", names[i]);
    }
    for (int n = 0; n <= 5; n++) {
        char v[4];
        snprintf(v, sizeof(v), "%d", n);
        cr_assert_eq(read_with("P2P_TRANSPORT_LOG", v), P2PT_SUCCESS, "%s", v);
        cr_assert_eq(cfg.log_level, n);
    }
    expect_rejected("P2P_TRANSPORT_LOG", "loud", "trace");
    expect_rejected("P2P_TRANSPORT_LOG", "6", NULL);
    expect_rejected("P2P_TRANSPORT_LOG", "-1", NULL);
    expect_rejected("P2P_TRANSPORT_LOG", "1K", NULL);
}

Test(config, log_level_abort_is_level_4_like_the_number)
{
    const char *abort_names[] = {"abort", "ABORT", "Abort", "4"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(read_with("P2P_TRANSPORT_LOG", abort_names[i]), P2PT_SUCCESS, "%s: %s",
                     abort_names[i], p2pt__last_error_text());
        cr_assert_eq(cfg.log_level, P2PT_LOG_ABORT, "%s", abort_names[i]);
    }
    cr_assert_eq(P2PT_LOG_ABORT, 4);
    expect_rejected("P2P_TRANSPORT_LOG", "bogus", "abort");
}

Test(config, validate_and_l2_hint_switches)
{
    cr_assert_eq(read_with("P2P_TRANSPORT_VALIDATE", "0"), P2PT_SUCCESS);
    cr_assert_eq(cfg.validate, 0);
    cr_assert_eq(read_with("P2P_TRANSPORT_VALIDATE", "1"), P2PT_SUCCESS);
    cr_assert_eq(cfg.validate, 1);
    expect_rejected("P2P_TRANSPORT_VALIDATE", "yes", "0 or 1");
    expect_rejected("P2P_TRANSPORT_VALIDATE", "2", "0 or 1");
    cr_assert_eq(read_with("P2P_TRANSPORT_L2_HINT", "EVICT_FIRST"), P2PT_SUCCESS);
    cr_assert_eq(tma()->l2_evict_first, 1);
    expect_rejected("P2P_TRANSPORT_L2_HINT", "keep", "evict_first");
}

Test(config, init_with_a_bad_transport_is_status_4_not_7)
{
    /* The plain case on a machine with or without a driver. */
    setenv("P2P_TRANSPORT", "bogus", 1);
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_INVALID_ARGUMENT, "%s", p2pt_last_error(NULL));
    cr_assert_null(h);
    const char *msg = p2pt_last_error(NULL);
    cr_assert(strstr(msg, "P2P_TRANSPORT") && strstr(msg, "bogus"), "%s", msg);
    /* The same through the init argument, which names itself. */
    unsetenv("P2P_TRANSPORT");
    p2pt_init_args a = {sizeof(a), NULL, "bogus"};
    cr_assert_eq(p2pt_init(&a, &h), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "p2pt_init_args.transport") != NULL, "%s",
              p2pt_last_error(NULL));
}

/* args->size is the size of this struct or of an older one, which ends
 * after one of its fields; a size that ends inside a field (half of the
 * transport's pointer) is status 4 naming it, before anything is read. */
Test(config, init_args_size_ends_after_a_field_or_is_status_4)
{
    unsetenv("P2P_TRANSPORT");
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    const size_t with_logger = offsetof(p2pt_init_args, logger) + sizeof(p2pt_logger_t),
                 with_transport = offsetof(p2pt_init_args, transport) + sizeof(char *);
    for (size_t size = 0; size <= sizeof(p2pt_init_args) + 8; size++) {
        p2pt_init_args a = {size, NULL, "bogus", NULL};
        p2pt_handle *h = (p2pt_handle *)0x1;
        p2pt_status st = p2pt_init(&a, &h);
        const char *msg = p2pt_last_error(NULL);
        cr_assert_null(h, "size %zu", size);
        if (size == with_logger) { /* transport not read: the driver is looked for */
            cr_expect_eq(st, P2PT_NO_DRIVER, "size %zu: %d %s", size, (int)st, msg);
        } else if (size == with_transport || size >= sizeof(p2pt_init_args)) {
            cr_expect_eq(st, P2PT_INVALID_ARGUMENT, "size %zu", size);
            cr_expect(strstr(msg, "p2pt_init_args.transport") != NULL, "size %zu: %s", size,
                      msg);
        } else {
            cr_expect_eq(st, P2PT_INVALID_ARGUMENT, "size %zu", size);
            char want[64];
            snprintf(want, sizeof(want), "args->size is %zu;", size);
            cr_expect(strstr(msg, want) != NULL, "size %zu: %s", size, msg);
        }
    }
}

Test(config, init_reports_a_bad_transport_before_looking_for_a_driver)
{
    /* Even with a driver path that cannot load, the typo wins. */
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    setenv("P2P_TRANSPORT", "bogus", 1);
    p2pt_handle *h = (p2pt_handle *)0x1;
    cr_assert_eq(p2pt_init(NULL, &h), P2PT_INVALID_ARGUMENT);
    cr_assert_null(h);
    const char *msg = p2pt_last_error(NULL);
    cr_assert(strstr(msg, "P2P_TRANSPORT") && strstr(msg, "bogus"), "%s", msg);
}

Test(config, cache_dir_off_explicit_empty_and_too_long)
{
    cr_assert_eq(read_with("P2P_TRANSPORT_CACHE_DIR", "Off"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.cache_dir, "", "\"off\" (any case) disables the cache");
    cr_assert_eq(read_with("P2P_TRANSPORT_CACHE_DIR", "/var/cache/p2pt"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.cache_dir, "/var/cache/p2pt");
    expect_rejected("P2P_TRANSPORT_CACHE_DIR", "", "set but empty");
    char long_path[P2PT_PATH_MAX + 10];
    memset(long_path, 'x', sizeof(long_path) - 1);
    long_path[0] = '/';
    long_path[sizeof(long_path) - 1] = '\0';
    cr_assert_eq(read_with("P2P_TRANSPORT_CACHE_DIR", long_path), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "P2P_TRANSPORT_CACHE_DIR") && strstr(msg, "1033 characters"), "%s",
              msg);
}

Test(config, cache_dir_default_follows_xdg_then_home_then_none)
{
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/home/u", 1);
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.cache_dir, "/x/cache/p2pt");
    setenv("XDG_CACHE_HOME", "relative", 1); /* the XDG spec ignores relative paths */
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.cache_dir, "/home/u/.cache/p2pt");
    /* A base too long for a path is passed over for the next. */
    char longer[2 * P2PT_PATH_MAX];
    memset(longer, 'x', sizeof(longer) - 1);
    longer[0] = '/';
    longer[sizeof(longer) - 1] = '\0';
    setenv("XDG_CACHE_HOME", longer, 1);
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.cache_dir, "/home/u/.cache/p2pt");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.cache_dir, "", "no base directory: no cache");
}

Test(config, pdl_defaults_on_and_takes_only_0_or_1)
{
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_eq(tma()->launch.pdl, 1);
    cr_assert_eq(read_with("P2P_TRANSPORT_PDL", "0"), P2PT_SUCCESS);
    cr_assert_eq(tma()->launch.pdl, 0);
    expect_rejected("P2P_TRANSPORT_PDL", "yes", "0 or 1");
    expect_rejected("P2P_TRANSPORT_PDL", "2", "0 or 1");
    expect_rejected("P2P_TRANSPORT_PDL", "", "set but empty");
}

/* ------------------------------------------------ p2pt_init_args.options */

static p2pt_status read_options(const char *options)
{
    return p2pt__config_read(&cfg, options, NULL);
}

Test(config, options_override_the_environment_for_that_read_only)
{
    setenv("P2P_TRANSPORT_STAGES", "4", 1);
    setenv("P2P_TRANSPORT_CHUNK_BYTES", "16K", 1);
    setenv("P2P_TRANSPORT_MAX_CTAS", "8", 1);
    /* Spaces, commas and both mixed separate items. */
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGES=2, P2P_TRANSPORT_CHUNK_BYTES=32K,"
                              "P2P_TRANSPORT_VALIDATE=0  P2P_TRANSPORT_LOG=info"),
                 P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert_eq(tma()->stages, 2);
    cr_assert_eq(tma()->chunk_bytes, 32768);
    cr_assert_eq(cfg.validate, 0);
    cr_assert_eq(cfg.log_level, P2PT_LOG_INFO);
    cr_assert_eq(tma()->launch.max_ctas, 8,
                 "a variable the options do not name comes from the environment");
    /* The environment itself is untouched: the next read without options sees it. */
    cr_assert_str_eq(getenv("P2P_TRANSPORT_STAGES"), "4");
    cr_assert_eq(read_options(NULL), P2PT_SUCCESS);
    cr_assert_eq(tma()->stages, 4);
    cr_assert_eq(tma()->chunk_bytes, 16384);
    /* An empty options string (or only separators) is no options. */
    cr_assert_eq(read_options(" ,, "), P2PT_SUCCESS);
    cr_assert_eq(tma()->stages, 4);
}

Test(config, options_last_item_wins_and_the_transport_argument_beats_them)
{
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGES=2 P2P_TRANSPORT_STAGES=3"), P2PT_SUCCESS);
    cr_assert_eq(tma()->stages, 3);
    setenv("P2P_TRANSPORT", "ce", 1);
    cr_assert_eq(read_options("P2P_TRANSPORT=tma"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, "tma", "an options item beats the environment");
    cr_assert_eq(p2pt__config_read(&cfg, "P2P_TRANSPORT=tma", "ce"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, "ce", "p2pt_init_args.transport beats an options item");
    /* Even a bad P2P_TRANSPORT item is never read when the argument is set. */
    cr_assert_eq(p2pt__config_read(&cfg, "P2P_TRANSPORT=bogus", "tma"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.transport, "tma");
}

Test(config, options_unknown_name_is_status_4_naming_it_and_the_accepted_names)
{
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGES=2 P2P_TRANSPORT_STAGE=3"),
                 P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "p2pt_init_args.options") && strstr(msg, "\"P2P_TRANSPORT_STAGE\"") &&
                  strstr(msg, "not a p2pt setting"),
              "%s", msg);
    cr_assert(strstr(msg, "P2P_TRANSPORT_CACHE_DIR") && strstr(msg, "P2P_CUDA_LIBRARY"),
              "the message lists what is accepted: %s", msg);
    /* Names are exact: the environment's spelling, upper case. */
    cr_assert_eq(read_options("p2p_transport_stages=2"), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "p2p_transport_stages") != NULL, "%s",
              p2pt__last_error_text());
}

Test(config, options_unknown_name_suggests_the_nearest_known_one)
{
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGE=3"), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "did you mean P2P_TRANSPORT_STAGES?") != NULL, "%s", msg);
    cr_assert_eq(read_options("P2P_TRANSPORT_MAXCTAS=3"), P2PT_INVALID_ARGUMENT);
    msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "did you mean P2P_TRANSPORT_MAX_CTAS?") != NULL, "%s", msg);
    /* Names are exact, so lower case is refused, and the suggestion says
     * how to spell it. */
    cr_assert_eq(read_options("p2p_transport_validate=1"), P2PT_INVALID_ARGUMENT);
    msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "did you mean P2P_TRANSPORT_VALIDATE?") != NULL, "%s", msg);
    /* A name cut short is nearest its whole. */
    cr_assert_eq(read_options("P2P_TRANSPORT_CHUNK=32K"), P2PT_INVALID_ARGUMENT);
    msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "did you mean P2P_TRANSPORT_CHUNK_BYTES?") != NULL, "%s", msg);
}

Test(config, options_name_like_no_known_one_gets_no_suggestion)
{
    cr_assert_eq(read_options("COLOR=blue"), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "\"COLOR\" is not a p2pt setting") != NULL, "%s", msg);
    cr_assert(strstr(msg, "did you mean") == NULL, "%s", msg);
}

/* ------------------------------------- one suggestion, wherever the slip is */

static char warned[4096];

static void capture_warning(p2pt_log_level level, unsigned long flags, const char *file,
                            int line, const char *fmt, ...)
{
    (void)level, (void)flags, (void)file, (void)line;
    size_t used = strlen(warned);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warned + used, sizeof(warned) - used, fmt, ap);
    va_end(ap);
    strncat(warned, "\n", sizeof(warned) - strlen(warned) - 1);
}

/* What init warns about `name` set in the environment (empty: nothing). */
static const char *warning_for_env(const char *name)
{
    struct p2pt_config_known known;
    struct p2pt_logger log = {capture_warning, P2PT_LOG_WARN};
    p2pt__config_known(&known);
    warned[0] = '\0';
    setenv(name, "1", 1);
    p2pt__config_warn_unknown_env(&log, &known);
    unsetenv(name);
    return warned;
}

/* What the options refuse `name=1` with. */
static const char *refusal_for_option(const char *name)
{
    char item[128];
    snprintf(item, sizeof(item), "%s=1", name);
    cr_assert_eq(read_options(item), P2PT_INVALID_ARGUMENT, "%s was accepted", item);
    return p2pt__last_error_text();
}

Test(config, a_misspelt_name_gets_the_same_suggestion_in_the_environment_and_the_options)
{
    static const char *const slips[][2] = {
        /* the last word wrong, where one name alone has the words before it */
        {"P2P_TRANSPORT_CHUNK_SIZ", "P2P_TRANSPORT_CHUNK_BYTES"},
        {"P2P_TRANSPORT_CHUNK_SIZE", "P2P_TRANSPORT_CHUNK_BYTES"},
        {"P2P_CUDA_PATH", "P2P_CUDA_LIBRARY"},
        /* a letter short, two letters swapped, a name cut short */
        {"P2P_TRANSPORT_STAGE", "P2P_TRANSPORT_STAGES"},
        {"P2P_TRANSPROT_LOG", "P2P_TRANSPORT_LOG"},
        {"P2P_TRANSPORT_CHUNK", "P2P_TRANSPORT_CHUNK_BYTES"},
        {"P2P_NVRTC_LIB", "P2P_NVRTC_LIBRARY"},
        {"P2P_TRANSPORT_MAXCTAS", "P2P_TRANSPORT_MAX_CTAS"},
    };
    for (size_t i = 0; i < sizeof(slips) / sizeof(slips[0]); i++) {
        char want[128];
        snprintf(want, sizeof(want), "did you mean %s?", slips[i][1]);
        const char *env = warning_for_env(slips[i][0]);
        cr_expect(strstr(env, slips[i][0]) && strstr(env, want),
                  "environment %s: want \"%s\", warned: %s", slips[i][0], want, env);
        const char *opt = refusal_for_option(slips[i][0]);
        cr_expect(strstr(opt, want) != NULL, "options %s: want \"%s\", got: %s", slips[i][0],
                  want, opt);
    }
}

Test(config, a_name_like_none_gets_no_suggestion_in_the_environment_or_the_options)
{
    /* P2P_TRANSPORT_* is p2pt's own prefix: warned about, naming none of the
     * many names that share it. */
    const char *env = warning_for_env("P2P_TRANSPORT_WHATEVER");
    cr_expect(strstr(env, "P2P_TRANSPORT_WHATEVER is set but p2pt reads no such variable") &&
                  strstr(env, "did you mean") == NULL,
              "%s", env);
    const char *opt = refusal_for_option("P2P_TRANSPORT_WHATEVER");
    cr_expect(strstr(opt, "did you mean") == NULL, "%s", opt);
    /* Another program's P2P_* name is left alone. */
    env = warning_for_env("P2P_SOMETHING_ELSE_ENTIRELY");
    cr_expect_str_empty(env, "%s", env);
    opt = refusal_for_option("P2P_SOMETHING_ELSE_ENTIRELY");
    cr_expect(strstr(opt, "did you mean") == NULL, "%s", opt);
}

/* The refusal of transport `value` given in `where`: "env", "options" or
 * "argument" (p2pt_init_args.transport). */
static const char *transport_refusal(const char *where, const char *value)
{
    char item[128];
    p2pt_status st;
    if (strcmp(where, "env") == 0) {
        st = read_with("P2P_TRANSPORT", value);
        unsetenv("P2P_TRANSPORT");
    } else if (strcmp(where, "options") == 0) {
        snprintf(item, sizeof(item), "P2P_TRANSPORT=%s", value);
        st = read_options(item);
    } else {
        st = p2pt__config_read(&cfg, NULL, value);
    }
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "%s \"%s\" was accepted", where, value);
    return p2pt__last_error_text();
}

Test(config, a_misspelt_transport_is_told_the_one_it_likely_meant)
{
    static const char *const where[] = {"env", "options", "argument"};
    static const char *const slips[][2] = {
        {"tmaa", "tma"}, {"TMAA", "tma"}, {"mta", "tma"},
        {"cee", "ce"},   {"atuo", "auto"}, {"tm", "tma"},
    };
    for (size_t w = 0; w < 3; w++) {
        for (size_t i = 0; i < sizeof(slips) / sizeof(slips[0]); i++) {
            char want[64];
            snprintf(want, sizeof(want), "; did you mean %s?", slips[i][1]);
            const char *msg = transport_refusal(where[w], slips[i][0]);
            cr_expect(strstr(msg, want) != NULL && strstr(msg, "accepted (any case): ce, tma"),
                      "%s \"%s\": want the accepted names and \"%s\", got: %s", where[w],
                      slips[i][0], want, msg);
        }
        /* Nothing near: the accepted names alone. */
        static const char *const far[] = {"bogus", "xyz", "nccl"};
        for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
            const char *msg = transport_refusal(where[w], far[i]);
            cr_expect(strstr(msg, "did you mean") == NULL, "%s \"%s\": %s", where[w], far[i],
                      msg);
        }
    }
}

Test(config, options_item_without_equals_sign_is_status_4)
{
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGES"), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "p2pt_init_args.options") && strstr(msg, "\"P2P_TRANSPORT_STAGES\"") &&
                  strstr(msg, "NAME=VALUE"),
              "%s", msg);
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGES=2 4"), P2PT_INVALID_ARGUMENT,
                 "a space splits items, so \"4\" alone is an item without '='");
    cr_assert(strstr(p2pt__last_error_text(), "\"4\"") != NULL, "%s", p2pt__last_error_text());
}

Test(config, options_empty_value_is_refused_even_when_the_environment_has_one)
{
    setenv("P2P_TRANSPORT_STAGES", "2", 1);
    cr_assert_eq(read_options("P2P_TRANSPORT_STAGES="), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "p2pt_init_args.options P2P_TRANSPORT_STAGES") &&
                  strstr(msg, "set but empty"),
              "%s", msg);
}

Test(config, options_bad_value_names_the_options_the_variable_and_the_value)
{
    static const char *const bad[][3] = {
        /* item, variable, what the message says is accepted */
        {"P2P_TRANSPORT_STAGES=17", "P2P_TRANSPORT_STAGES", "1 to 16"},
        {"P2P_TRANSPORT_CHUNK_BYTES=1000", "P2P_TRANSPORT_CHUNK_BYTES", "multiple of 16"},
        {"P2P_TRANSPORT_LOG=loud", "P2P_TRANSPORT_LOG", "abort"},
        {"P2P_TRANSPORT=bogus", "P2P_TRANSPORT", "ce, tma"},
        {"P2P_TRANSPORT_L2_HINT=keep", "P2P_TRANSPORT_L2_HINT", "evict_first"},
        {"P2P_TRANSPORT_PDL=yes", "P2P_TRANSPORT_PDL", "0 or 1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(read_options(bad[i][0]), P2PT_INVALID_ARGUMENT, "%s", bad[i][0]);
        const char *msg = p2pt__last_error_text();
        const char *value = strchr(bad[i][0], '=') + 1;
        cr_assert(strstr(msg, "p2pt_init_args.options") && strstr(msg, bad[i][1]) &&
                      strstr(msg, value) && strstr(msg, bad[i][2]),
                  "%s -> %s", bad[i][0], msg);
    }
    /* The ring check names the values whichever source they came from. */
    cr_assert_eq(read_options("P2P_TRANSPORT_CHUNK_BYTES=64K P2P_TRANSPORT_STAGES=4"),
                 P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "232448") != NULL, "%s", p2pt__last_error_text());
}

Test(config, options_too_long_or_too_many_items_are_status_4)
{
    char text[5000];
    memset(text, ' ', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    cr_assert_eq(read_options(text), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "characters long") != NULL, "%s",
              p2pt__last_error_text());
    size_t used = 0;
    for (int i = 0; i < 33; i++)
        used += (size_t)snprintf(text + used, sizeof(text) - used, "P2P_TRANSPORT_STAGES=2 ");
    cr_assert_eq(read_options(text), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "more than 32 items") != NULL, "%s",
              p2pt__last_error_text());
}

/* -------------------------------------------------------------- version */

Test(version, string_is_built_from_the_numbers_cmake_reads)
{
    char expect[32];
    snprintf(expect, sizeof(expect), "%d.%d.%d", P2PT_VERSION_MAJOR, P2PT_VERSION_MINOR,
             P2PT_VERSION_PATCH);
    cr_assert_str_eq(P2PT_VERSION_STRING, expect);
    cr_assert_str_eq(p2pt_plugin_v1.version, expect, "the plugin table reports the header's");
#ifdef P2PT_CMAKE_PROJECT_VERSION
    cr_assert_str_eq(P2PT_CMAKE_PROJECT_VERSION, expect,
                     "CMake's project version (soname, p2pt.pc) differs from p2pt.h");
#endif
}

Test(config, stream_min_takes_sizes_and_zero_and_rejects_junk)
{
    cr_assert_eq(read_with("P2P_TRANSPORT_STREAM_MIN", "16M"), P2PT_SUCCESS);
    cr_assert_eq(tma()->stream_min, 16u << 20);
    cr_assert_eq(read_with("P2P_TRANSPORT_STREAM_MIN", "0"), P2PT_SUCCESS);
    cr_assert_eq(tma()->stream_min, 0);
    unsetenv("P2P_TRANSPORT_STREAM_MIN");
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_eq(tma()->stream_min, 8u << 20, "default: 8 MiB");
    expect_rejected("P2P_TRANSPORT_STREAM_MIN", "lots", "from 0 (never)");
    /* Sizes take the suffix the message prints: 1T is the limit itself. */
    cr_assert_eq(read_with("P2P_TRANSPORT_STREAM_MIN", "1T"), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    cr_assert_eq(tma()->stream_min, 1ull << 40);
    expect_rejected("P2P_TRANSPORT_STREAM_MIN", "2T", "to 1T bytes");
}

Test(config, link_peer_widens_the_peer_grid_and_rejects_what_is_out_of_range)
{
    unsetenv("P2P_TRANSPORT_LINK_PEER");
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_eq(cfg.link_peer, 0, "default: the table's 'link peer'");
    cr_assert_eq(read_with("P2P_TRANSPORT_LINK_PEER", "64"), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    cr_assert_eq(cfg.link_peer, 64);
    cr_assert_eq(read_with("P2P_TRANSPORT_LINK_PEER", "0"), P2PT_SUCCESS);
    cr_assert_eq(cfg.link_peer, 0);
    expect_rejected("P2P_TRANSPORT_LINK_PEER", "4097", "from 0 (the table's 'link peer'");
    expect_rejected("P2P_TRANSPORT_LINK_PEER", "-1", "to 4096");
    expect_rejected("P2P_TRANSPORT_LINK_PEER", "wide", NULL);
    expect_rejected("P2P_TRANSPORT_LINK_PEER", "", NULL);
    unsetenv("P2P_TRANSPORT_LINK_PEER");
}

Test(config, auto_table_path_is_read_and_its_length_checked)
{
    cr_assert_eq(read_with("P2P_TRANSPORT_AUTO_TABLE", "/tmp/x.table"), P2PT_SUCCESS);
    cr_assert_str_eq(cfg.auto_table, "/tmp/x.table");
    char long_path[P2PT_PATH_MAX + 8];
    memset(long_path, 'a', sizeof(long_path) - 1);
    long_path[sizeof(long_path) - 1] = '\0';
    cr_assert_eq(read_with("P2P_TRANSPORT_AUTO_TABLE", long_path), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "P2P_TRANSPORT_AUTO_TABLE") &&
                  strstr(p2pt__last_error_text(), "characters long"),
              "%s", p2pt__last_error_text());
    unsetenv("P2P_TRANSPORT_AUTO_TABLE");
}

Test(config, batch_staging_is_auto_gpu_or_host)
{
    unsetenv("P2P_TRANSPORT_BATCH_STAGING");
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    cr_assert_eq(tma()->batch_staging, P2PT_STAGING_AUTO, "default: by the batch's size");
    cr_assert_eq(read_with("P2P_TRANSPORT_BATCH_STAGING", "HOST"), P2PT_SUCCESS);
    cr_assert_eq(tma()->batch_staging, P2PT_STAGING_HOST);
    cr_assert_eq(read_with("P2P_TRANSPORT_BATCH_STAGING", "gpu"), P2PT_SUCCESS);
    cr_assert_eq(tma()->batch_staging, P2PT_STAGING_GPU);
    cr_assert_eq(read_with("P2P_TRANSPORT_BATCH_STAGING", "Auto"), P2PT_SUCCESS);
    cr_assert_eq(tma()->batch_staging, P2PT_STAGING_AUTO);
    expect_rejected("P2P_TRANSPORT_BATCH_STAGING", "mapped", "expected auto, gpu or host");
}
