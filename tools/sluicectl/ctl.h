/* sluicectl subcommands: each takes argv starting at its own name and returns the exit status. */
#pragma once

#include <stddef.h>

int ctl_policy(int argc, char **argv);
int ctl_log(int argc, char **argv);
int ctl_session(int argc, char **argv); /* `sessions` and `session end|save|discard` */
int ctl_ask(int argc, char **argv);     /* `asks`, `approve [ID]`, `deny ID` */
/* ctl_fsask.c: the opens held by `sluice run --fs ask` gates. arr: a json array to fill (json_object *),
 * or NULL to print a table; *count: how many. Returns the number of gates reached or -errno. */
#include <stdbool.h>
int ctl_fsask_list(void *arr, unsigned *count, char *err, size_t errlen);
int ctl_fsask_decide(const char *id, bool allow, bool subtree);
