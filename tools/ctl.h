/* sluicectl subcommands: each takes argv starting at its own name and returns the exit status. */
#pragma once

int ctl_policy(int argc, char **argv);
int ctl_log(int argc, char **argv);
