/* predict_cmd.h — psctl's predict command: scores a file on the workers' hosts
 * with the running or last job's model, every training replica its shard,
 * and writes the lines (predict_out.h) in input order on this machine
 * (docs/model-life.md, "Scoring a file"). Single-threaded, as psctl.
 */
#ifndef PSCTL_PREDICT_H
#define PSCTL_PREDICT_H

#include "commands.h"

/* psctl predict FILE -o OUT [--checkpoint ID]: psctl's exit status (0 done;
 * 1 refused: the message names the worker and why; 69 unreachable; 64
 * usage). OUT is written through OUT.tmp and renamed; nothing is left on a
 * failure. */
int psctl_cmd_predict(const psctl_cli_t *c, const char *file);

#endif
