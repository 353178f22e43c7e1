/* sluicectl subcommands: each takes argv starting at its own name and returns the exit status. */
#pragma once

#include <stddef.h>

/* Prints s with every control or non-ASCII byte as '?' (names and paths come from sessions, whose bytes
 * must not drive the terminal), padded with spaces to width (0: none). */
void ctl_print_plain(const char *s, int width);
void ctl_print_json(const char *line, size_t len); /* one line of JSON, control bytes as \uXXXX */
int ctl_policy(int argc, char **argv);
int ctl_log(int argc, char **argv);
int ctl_session(int argc, char **argv); /* `sessions` and `session end|save|discard` */
int ctl_ask(int argc, char **argv);     /* `asks`, `approve [ID]`, `deny ID` */
/* ctl_fsask.c: the opens held by `sluice run --fs ask` gates. arr: a json array to fill (json_object *),
 * or NULL to print a table; *count: how many. Returns the number of gates reached or -errno. */
#include <stdbool.h>
int ctl_fsask_list(void *arr, unsigned *count, char *err, size_t errlen);
int ctl_fsask_decide(const char *id, bool allow, bool subtree, const char *layer, const char *project);
/* `policy explain --path P [--project DIR]`: which layer lets --fs ask read P (exit 0), or that it is
 * masked (1) or asked about (3). */
int ctl_fsask_explain(int argc, char **argv);
/* ctl_ask.c: adds entry to the list `key` (in the object `section`, or at the top level when NULL) of
 * the policy file of layer user|project|org, checked to load before it replaces the old one; written
 * through common/fs_safe.h (no symlink followed; a project as its owner). */
int ctl_remember(const char *entry, const char *section, const char *key, const char *layer, const char *project,
                 char *err, size_t errlen);
int ctl_metrics(int argc, char **argv); /* `metrics` */
