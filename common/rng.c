/* rng.c — splitmix64 + xoshiro256** (public-domain algorithms by Vigna). */
#include "rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void psc_rng_seed(psc_rng_t *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t psc_rng_next(psc_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double psc_rng_uniform(psc_rng_t *r) { return (double)(psc_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

uint64_t psc_rng_below(psc_rng_t *r, uint64_t n)
{
    /* Lemire's nearly-divisionless method would be faster; rejection keeps it exact. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = psc_rng_next(r);
    while (x >= limit);
    return x % n;
}

uint64_t psc_seed_mix(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ULL);
    return splitmix64(&x);
}
