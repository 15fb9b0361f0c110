/* nonfinite.h — the scan that refuses a gradient with a NaN or an Inf, at
 * memory speed: dense pushes (store.c) and sparse rows (sparse_table.c) alike.
 * Pure functions; any thread.
 */
#ifndef PSC_NONFINITE_H
#define PSC_NONFINITE_H

#include "psc.h"

#include <stddef.h>

/* The index of the first non-finite float of the n at p (any alignment), or n. */
size_t nonfinite_first(const void *p, size_t n);
/* The same over n floats held in segments split anywhere (a float may
 * straddle two). */
size_t nonfinite_first_iov(const psc_iov_t *g, int ng, size_t n);

#endif
