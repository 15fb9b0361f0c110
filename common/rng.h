/* rng.h — small seeded PRNG (splitmix64 seeding a xoshiro256**), identical on
 * every machine, used for shuffling, dropout masks and initialization.
 * Not thread-safe per state; each user owns its state. */
#ifndef PSC_RNG_H
#define PSC_RNG_H

#include <stdint.h>

typedef struct psc_rng {
    uint64_t s[4];
} psc_rng_t;

void psc_rng_seed(psc_rng_t *r, uint64_t seed);
uint64_t psc_rng_next(psc_rng_t *r);
/* Uniform in [0, 1). */
double psc_rng_uniform(psc_rng_t *r);
/* Uniform integer in [0, n). n > 0. */
uint64_t psc_rng_below(psc_rng_t *r, uint64_t n);
/* Mixes several words into one seed (for per-epoch / per-layer streams). */
uint64_t psc_seed_mix(uint64_t a, uint64_t b);

#endif
