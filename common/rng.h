/* rng.h — two generators, identical on every machine:
 *   - psc_rng: a small seeded sequential PRNG (splitmix64 seeding a
 *     xoshiro256**) for shuffling and initialization. Not thread-safe per
 *     state; each user owns its state.
 *   - psc_philox4x32_10: a counter-based generator (Philox-4x32-10, Salmon et
 *     al., SC'11, as in Random123 and cuRAND): a keyed bijection of a 128-bit
 *     counter, no state, so any element of a stream is computed on its own, in
 *     any order, on any thread. The dropout masks use it (psc_dropout_bits):
 *     the CPU tower and the CUDA tower's kernel call the same inline function,
 *     so both backends drop exactly the same units. Its functions are
 *     `static inline` and, under nvcc, __host__ __device__; they are pure and
 *     callable from any thread.
 */
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
/* splitmix64's finalizer: a bijection of 64 bits in which every input bit
 * moves every output bit; the hash of the sparse tables' id sets (PS shards,
 * accumulators, the client's deduplication). */
static inline uint64_t psc_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Mixes several words into one seed (for per-epoch / per-layer streams). */
uint64_t psc_seed_mix(uint64_t a, uint64_t b);

/* ---- counter-based: Philox-4x32-10 ---- */

/* The CUDA tower defines PSC_HOST_DEVICE as __host__ __device__ before it
 * includes this header, so its kernels call the same functions; elsewhere they
 * are plain static inline C. */
#ifndef PSC_HOST_DEVICE
#define PSC_HOST_DEVICE
#endif

typedef struct psc_philox4 {
    uint32_t v[4];
} psc_philox4_t;

/* Philox-4x32 with 10 rounds: four 32-bit words from counter ctr and key
 * (k0, k1); Random123's known answers hold (tests/unit/test_tower_cpu.c). */
PSC_HOST_DEVICE static inline psc_philox4_t psc_philox4x32_10(psc_philox4_t ctr, uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        if (round) { /* the key schedule: Weyl increments before rounds 2..10 */
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * ctr.v[0], p1 = (uint64_t)0xCD9E8D57u * ctr.v[2];
        psc_philox4_t next;
        next.v[0] = (uint32_t)(p1 >> 32) ^ ctr.v[1] ^ k0;
        next.v[1] = (uint32_t)p1;
        next.v[2] = (uint32_t)(p0 >> 32) ^ ctr.v[3] ^ k1;
        next.v[3] = (uint32_t)p0;
        ctr = next;
    }
    return ctr;
}

/* Dropout masks. Unit `element` of dropout layer `layer` in the step seeded by
 * `seed` (the trainer folds the job's seed, the replica and the step into it)
 * gets 32 random bits; it is KEPT when they are >= psc_dropout_threshold(rate),
 * so P(drop) = rate to 2^-32. `element` is the unit's index in the step's whole
 * batch, (example's index in the batch) * (layer's features per example) +
 * feature, so a tower that gets a slice of the batch draws what one tower on
 * the whole batch would. Key = the seed; counter = (element / 4, layer, "drop"),
 * word element % 4 of the block. */
PSC_HOST_DEVICE static inline uint32_t psc_dropout_bits(uint64_t seed, uint32_t layer, uint64_t element)
{
    uint64_t block = element >> 2;
    psc_philox4_t ctr;
    ctr.v[0] = (uint32_t)block;
    ctr.v[1] = (uint32_t)(block >> 32);
    ctr.v[2] = layer;
    ctr.v[3] = 0x64726f70u; /* "drop": other users of the generator take other words */
    return psc_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32)).v[element & 3];
}

/* The keep threshold of a drop rate in [0, 1): floor(rate * 2^32), computed
 * once on the host (exact: a float times a power of two) and used by both
 * backends. */
static inline uint32_t psc_dropout_threshold(float rate)
{
    if (!(rate > 0.0f)) return 0;
    double t = (double)rate * 4294967296.0;
    return t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
}

#endif
