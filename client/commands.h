/* commands.h — psctl's commands: one table of name, function, whether it
 * takes an argument and whether it needs the whole cluster. main.c parses
 * the options into a psctl_cli_t, looks the command up here and calls it;
 * adding a command is one function and one row (and a line of --help).
 *
 * Single-threaded: psctl runs one command on its main thread.
 */
#ifndef PSCTL_COMMANDS_H
#define PSCTL_COMMANDS_H

#include "tf_config.h"

#include <signal.h>
#include <stdint.h>

/* What the options said; main() owns it (the strings point into argv). */
typedef struct psctl_cli {
    const char *chief;     /* the chief's address */
    psc_cluster_t cluster; /* when known (--cluster or TF_CONFIG) */
    int have_cluster;
    int timeout_ms;  /* per call */
    int timeout_set; /* --timeout_secs given: it bounds checkpoint and eval too */
    const char *reason, *format, *out;
    uint64_t checkpoint; /* --checkpoint: eval, export and predict read this committed checkpoint (0: live) */
    int detach;
    const char *warm_start; /* train --warm_start: the spec's warm_start.from (--checkpoint: .checkpoint) */
} psctl_cli_t;

/* Runs a command; `arg` is its argument (NULL unless takes_arg). Returns
 * psctl's exit status after printing the outcome (docs/running.md, psctl). */
typedef int (*psctl_command_fn)(const psctl_cli_t *c, const char *arg);

typedef struct psctl_command {
    const char *name;
    psctl_command_fn run;
    int takes_arg;        /* train JOB.json, predict FILE; the others take none */
    int needs_cluster;    /* status, export, predict: every member; the others need only the chief */
    const char *arg_name; /* takes_arg: what the argument is ("JOB.json"), for messages */
} psctl_command_t;

/* Every command, in --help's order, ending with a row whose name is NULL. */
extern const psctl_command_t psctl_commands[];

/* The command called `name`, or NULL. */
const psctl_command_t *psctl_command_find(const char *name);

/* Set by main()'s SIGINT handler: a followed job is then cancelled (exit 130). */
extern volatile sig_atomic_t psctl_interrupted;

#endif
