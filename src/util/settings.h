/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A setting declared as data: its variable, its kind, its default and what
 * it accepts, and where its value goes (an offset into its owner's struct of
 * settings). The config module reads shared settings and the ones each
 * engine declares through the same code (settings.c), so every variable is
 * parsed, refused and suggested the same way, and config knows no engine.
 * CUDA-free.
 */
#ifndef P2PT_SETTINGS_H
#define P2PT_SETTINGS_H

#include "common.h"

enum p2pt_setting_kind {
    P2PT_SETTING_SIZE, /* size_t: bytes, with an optional binary K/M/G/T suffix */
    P2PT_SETTING_INT,  /* int from min to max */
    P2PT_SETTING_BOOL, /* int, 0 or 1 */
    P2PT_SETTING_WORD, /* int: the value of one of `words`, any case */
};

struct p2pt_setting_word {
    const char *word;
    int value;
};

struct p2pt_setting {
    const char *name; /* the environment variable, also an options name */
    enum p2pt_setting_kind kind;
    size_t offset;               /* where the value goes in its owner's struct */
    unsigned long long def;      /* the default (WORD: the value) */
    unsigned long long min, max; /* SIZE and INT: the accepted range */
    /* SIZE and INT: a value must be a multiple of this (0: any), and why
     * (a message prints it after the number). */
    unsigned multiple;
    const char *multiple_why;
    const struct p2pt_setting_word *words; /* WORD: NULL-ended */
    const char *accepted; /* for messages: "expected <accepted>" */
};

/* The most settings one group declares (its check's `from` has a slot each). */
#define P2PT_SETTINGS_ITEMS 16

/* One owner's settings: shared ones, or one engine's. */
struct p2pt_settings {
    const char *owner; /* "shared", or the engine's name */
    const struct p2pt_setting *items;
    int n;
    size_t size; /* of the owner's struct the offsets point into */
    /* What no one value shows: a check across the values read (NULL: none).
     * from[i] says where item i's value came from ("NAME", "p2pt_init_args.options
     * NAME" or "NAME (default)"), for the message; status 4 when it fails. */
    p2pt_status (*check)(const void *values, const char *const *from);
};

/* Every item of `g` at its default in `values`. */
P2PT_INTERNAL void p2pt__settings_defaults(const struct p2pt_settings *g, void *values);
/* Text `v` for item `s` into `values`; status 4 naming `label` (where the
 * value came from), the value and what is accepted. */
P2PT_INTERNAL p2pt_status p2pt__setting_read(const struct p2pt_setting *s, void *values,
                                             const char *label, const char *v);
/* Decimal with an optional binary K/M/G/T suffix; false on junk or overflow. */
P2PT_INTERNAL bool p2pt__parse_size(const char *s, unsigned long long *out);

#endif /* P2PT_SETTINGS_H */
