/* sluicectl subcommands: each takes argv starting at its own name and returns the exit status. */
#pragma once

#include <stddef.h>

int ctl_policy(int argc, char **argv);
int ctl_log(int argc, char **argv);
int ctl_session(int argc, char **argv); /* `sessions` and `session end|save|discard` */
int ctl_ask(int argc, char **argv);     /* `asks`, `approve [ID]`, `deny ID` */
/* `netns create|delete`, shared by sluicectl and `sluice netns`; prog names the caller in messages. */
int ctl_netns(int argc, char **argv, const char *prog);
/* Compiles the standard layers plus presets/files and --allow patterns; policy_serialize() text
 * (malloced) or NULL with err set. */
char *ctl_build_policy(char **policies, size_t n_pol, char **allows, size_t n_allow, char *err, size_t errlen);
