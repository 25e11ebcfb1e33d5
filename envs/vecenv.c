/* vecenv.c: the env registry, the persistent thread pool and the generic vector. */
#define _GNU_SOURCE
#include "vecenv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ registry */

#define OCEAN_MAX_ENVS 64
static const EnvSpec* registry[OCEAN_MAX_ENVS];
static int registry_count = 0;

void ocean_register(const EnvSpec* spec) {
    if (registry_count < OCEAN_MAX_ENVS) registry[registry_count++] = spec;
}

const EnvSpec* ocean_find(const char* name) {
    for (int i = 0; i < registry_count; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

int ocean_count(void) { return registry_count; }
const EnvSpec* ocean_get(int index) { return index >= 0 && index < registry_count ? registry[index] : NULL; }

size_t ocean_obs_itemsize(ObsDtype dtype) { return dtype == OBS_FLOAT32 ? 4 : 1; }

/* ------------------------------------------------------------------ thread pool
 * Fast path: workers spin on a generation counter for a short while after each job, so a step that
 * follows quickly (the usual case in a training loop) costs no syscall. When idle they sleep on a
 * condition variable, so an idle vector burns no CPU. */

#define POOL_SPIN 20000

struct ThreadPool {
    int num_threads;
    pthread_t* threads;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    pthread_cond_t done;
    atomic_uint generation;
    atomic_int pending;
    atomic_int shutdown;
    RangeFn fn;
    void* ctx;
    int count;
};

typedef struct WorkerArg {
    ThreadPool* pool;
    int index;
} WorkerArg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void run_share(ThreadPool* pool, int index) {
    int n = pool->num_threads;
    int start = (int)((long long)pool->count * index / n);
    int end = (int)((long long)pool->count * (index + 1) / n);
    if (end > start) pool->fn(pool->ctx, start, end);
}

static void* worker_main(void* raw) {
    WorkerArg* arg = (WorkerArg*)raw;
    ThreadPool* pool = arg->pool;
    int index = arg->index;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->shutdown, memory_order_relaxed)) {
            if (++spins < POOL_SPIN) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool->mutex);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->shutdown))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->shutdown)) break;
        seen = gen;
        run_share(pool, index);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mutex);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mutex);
        }
    }
    return NULL;
}

ThreadPool* pool_create(int num_threads) {
    if (num_threads < 1) num_threads = 1;
    ThreadPool* pool = calloc(1, sizeof(ThreadPool));
    if (!pool) return NULL;
    pool->num_threads = num_threads;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->shutdown, 0);
    pool->threads = calloc((size_t)num_threads, sizeof(pthread_t));
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    for (int i = 1; i < num_threads; i++) {
        WorkerArg* arg = malloc(sizeof(WorkerArg));
        if (arg) {
            arg->pool = pool;
            arg->index = i;
        }
        if (!arg || pthread_create(&pool->threads[i], NULL, worker_main, arg) != 0) {
            free(arg);
            pool->num_threads = i; /* destroy joins the ones that started */
            pool_destroy(pool);
            return NULL;
        }
    }
    return pool;
}

void pool_run(ThreadPool* pool, RangeFn fn, void* ctx, int count) {
    pool->fn = fn;
    pool->ctx = ctx;
    pool->count = count;
    if (pool->num_threads == 1) {
        fn(ctx, 0, count);
        return;
    }
    atomic_store_explicit(&pool->pending, pool->num_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    run_share(pool, 0);
    int spins = 0;
    while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0) {
        if (++spins < POOL_SPIN) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&pool->mutex);
        while (atomic_load(&pool->pending) > 0) pthread_cond_wait(&pool->done, &pool->mutex);
        pthread_mutex_unlock(&pool->mutex);
    }
}

void pool_destroy(ThreadPool* pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->shutdown, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 1; i < pool->num_threads; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    free(pool->threads);
    free(pool);
}

/* ------------------------------------------------------------------ vector */

static inline void* env_at(VecEnv* vec, int i) { return vec->envs + (size_t)i * vec->spec->size; }

static void step_range(void* ctx, int start, int end) {
    VecEnv* vec = (VecEnv*)ctx;
    if (end > start) vec->spec->step_many(env_at(vec, start), end - start);
}

typedef struct ResetCtx {
    VecEnv* vec;
    uint64_t seed;
} ResetCtx;

static void reset_range(void* raw, int start, int end) {
    ResetCtx* ctx = (ResetCtx*)raw;
    VecEnv* vec = ctx->vec;
    for (int i = start; i < end; i++) {
        char* env = env_at(vec, i);
        rng_seed((Rng*)(env + vec->spec->rng_offset), ctx->seed, vec->env_offset + (uint64_t)i);
        vec->spec->reset(env);
    }
}

VecEnv* vecenv_create(const EnvSpec* spec, const double* params, int num_envs, int num_threads,
                      uint64_t seed, uint64_t env_offset, void* observations, int32_t* actions, float* rewards,
                      uint8_t* terminals, uint8_t* truncations, char* err, size_t err_size) {
    VecEnv* vec = calloc(1, sizeof(VecEnv));
    if (!vec) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    vec->spec = spec;
    spec->layout(params, &vec->layout);
    vec->num_envs = num_envs;
    vec->env_offset = env_offset;
    vec->num_threads = num_threads < 1 ? 1 : (num_threads > num_envs ? num_envs : num_threads);
    /* 64-byte aligned, one block for all envs: neighbouring envs share no cache line per thread range. */
    size_t bytes = ((size_t)num_envs * spec->size + 63) & ~(size_t)63;
    vec->envs = aligned_alloc(64, bytes ? bytes : 64);
    if (!vec->envs) {
        snprintf(err, err_size, "cannot allocate %zu bytes for %d %s envs", bytes, num_envs, spec->name);
        free(vec);
        return NULL;
    }
    memset(vec->envs, 0, bytes);
    const Layout* L = &vec->layout;
    size_t obs_row = (size_t)L->obs_size * ocean_obs_itemsize(L->obs_dtype);
    for (int i = 0; i < num_envs; i++) {
        size_t row = (size_t)i * L->agents_per_env;
        Buffers b = {
            (char*)observations + row * obs_row,
            actions + row * (size_t)L->action_dims,
            rewards + row,
            terminals + row,
            truncations + row,
        };
        Rng rng;
        rng_seed(&rng, seed, env_offset + (uint64_t)i);
        spec->init(env_at(vec, i), params, b, rng);
    }
    vec->pool = pool_create(vec->num_threads);
    if (!vec->pool) {
        snprintf(err, err_size, "cannot start %d threads", vec->num_threads);
        vecenv_close(vec);
        return NULL;
    }
    return vec;
}

void vecenv_reset(VecEnv* vec, uint64_t seed) {
    ResetCtx ctx = {vec, seed};
    pool_run(vec->pool, reset_range, &ctx, vec->num_envs);
}

void vecenv_step(VecEnv* vec) { pool_run(vec->pool, step_range, vec, vec->num_envs); }

void vecenv_log(VecEnv* vec, float* out) {
    int fields = vec->spec->log_fields;
    for (int f = 0; f < fields; f++) out[f] = 0.0f;
    for (int i = 0; i < vec->num_envs; i++) {
        float* log = (float*)((char*)env_at(vec, i) + vec->spec->log_offset);
        for (int f = 0; f < fields; f++) {
            out[f] += log[f];
            log[f] = 0.0f;
        }
    }
}

void vecenv_close(VecEnv* vec) {
    if (!vec) return;
    pool_destroy(vec->pool);
    vec->pool = NULL;
    if (vec->envs) {
        for (int i = 0; i < vec->num_envs; i++) vec->spec->close(env_at(vec, i));
        free(vec->envs);
    }
    free(vec);
}
