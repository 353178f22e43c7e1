/* sluicectl subcommands: each takes argv starting at its own name and returns the exit status. */
#pragma once

#include <stddef.h>

int ctl_policy(int argc, char **argv);
int ctl_log(int argc, char **argv);
int ctl_session(int argc, char **argv); /* `sessions` and `session end|save|discard` */
int ctl_ask(int argc, char **argv);     /* `asks`, `approve [ID]`, `deny ID` */
int ctl_metrics(int argc, char **argv); /* `metrics` */
