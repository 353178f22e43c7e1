/* `netns create|delete`: the command that sluicectl (`sluicectl netns`) and the launcher (`sluice netns`)
 * share. It builds the caller's policy from the standard layers and asks sluiced, through the client
 * library, for a named network namespace wired like a session. */
#pragma once

#include <stddef.h>

/* Runs `netns create|delete` with argv starting at "netns"'s first argument; prog names the caller in
 * messages ("sluice" or "sluicectl"). Returns the exit status. */
int netd_netns_cmd(int argc, char **argv, const char *prog);
/* Compiles the standard layers plus presets/files and --allow patterns; policy_serialize() text
 * (malloced) or NULL with err set. */
char *netd_build_cli_policy(char **policies, size_t n_pol, char **allows, size_t n_allow, char *err,
                            size_t errlen);
