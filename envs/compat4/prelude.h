/* prelude.h: included before any of a PufferLib-format env's own code (gcc -include), so that the
 * C library's random functions the env calls draw from our per-env stream instead of process-global
 * state. The compatibility header (vecenv.h beside this file) points compat4_current at the stream
 * of the env it is about to run, on the thread that runs it, before every call into the env's code
 * (my_init, c_reset, c_step): trajectories then depend on (seed, env index) only, never on thread
 * count or scheduling, as for our own envs. */
#ifndef PUFFER_COMPAT4_PRELUDE_H
#define PUFFER_COMPAT4_PRELUDE_H

#include <stdint.h>
#include <stdlib.h>

typedef struct Compat4Stream {
    uint64_t state;
    uint64_t inc;
} Compat4Stream;

extern __thread Compat4Stream* compat4_current;

/* PCG32, the generator our runtime's Rng uses; a value in [0, RAND_MAX] as rand() gives. */
static inline int compat4_rand(void) {
    static __thread Compat4Stream fallback = {0x853c49e6748fea9bULL, 0xda3e39cb94b95bdbULL};
    Compat4Stream* r = compat4_current ? compat4_current : &fallback;
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t x = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    x = (x >> rot) | (x << ((-rot) & 31));
    return (int)(x & (uint32_t)RAND_MAX);
}

/* rand_r(&env->rng): the env's own seed word is left alone; its draws come from the env's stream. */
static inline int compat4_rand_r(unsigned int* seed) {
    (void)seed;
    return compat4_rand();
}

/* srand(n): seeding is ours (the run seed and the env index), so an env's own srand changes nothing. */
static inline void compat4_srand(unsigned int seed) { (void)seed; }

#define rand() compat4_rand()
#define rand_r(seed) compat4_rand_r(seed)
#define srand(seed) compat4_srand(seed)

#endif
