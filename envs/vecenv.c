/* vecenv.c: the env registry, the persistent thread pool and the generic vector. */
#define _GNU_SOURCE
#include "vecenv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ registry */

#define OCEAN_MAX_ENVS 256
static const EnvSpec* registry[OCEAN_MAX_ENVS];
static int registry_count = 0;

void ocean_register(const EnvSpec* spec) {
    if (registry_count < OCEAN_MAX_ENVS) registry[registry_count++] = spec;
}

int ocean_registry_full(void) { return registry_count >= OCEAN_MAX_ENVS; }

const EnvSpec* ocean_find(const char* name) {
    for (int i = 0; i < registry_count; i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

int ocean_count(void) { return registry_count; }
const EnvSpec* ocean_get(int index) { return index >= 0 && index < registry_count ? registry[index] : NULL; }

size_t ocean_obs_itemsize(ObsDtype dtype) { return dtype == OBS_FLOAT32 ? 4 : 1; }

/* Every step checks every action before any env runs, on the caller's thread alone: a serial share of
 * each step that more threads cannot shrink. A loop that stops at the first bad value does not
 * vectorize, so one pass ORs the tests together and only a step that has a bad action looks for which
 * one. Values are compared as unsigned: negatives are out of range too. */
long long ocean_first_bad_action(const Layout* layout, const int32_t* actions, size_t rows) {
    const uint32_t* a = (const uint32_t*)actions;
    int dims = layout->action_dims;
    size_t n = rows * (size_t)dims;
    if (layout->action_continuous) { /* a float with every exponent bit set is an inf or a NaN */
        uint32_t bad = 0;
        for (size_t i = 0; i < n; i++) bad |= (a[i] & 0x7F800000u) == 0x7F800000u;
        if (!bad) return -1;
        for (size_t i = 0; i < n; i++)
            if ((a[i] & 0x7F800000u) == 0x7F800000u) return (long long)i;
        return -1;
    }
    uint32_t bad = 0;
    if (dims == 1) { /* v | (n - 1 - v) has its top bit set exactly when v < 0 or v >= n: adds and ORs */
        uint32_t last = (uint32_t)layout->action_n[0] - 1;
        for (size_t i = 0; i < n; i++) bad |= a[i] | (last - a[i]);
        bad >>= 31;
    } else {
        for (size_t r = 0; r < rows; r++)
            for (int d = 0; d < dims; d++) bad |= a[r * (size_t)dims + (size_t)d] >= (uint32_t)layout->action_n[d];
    }
    if (!bad) return -1;
    for (size_t i = 0; i < n; i++)
        if (a[i] >= (uint32_t)layout->action_n[i % (size_t)dims]) return (long long)i;
    return -1;
}

/* ------------------------------------------------------------------ thread pool
 *
 * A job (fn over [0, count)) is split into one home range per thread (the caller is thread 0), each
 * cut into a few units. A thread takes units of its own range, half of what is left at a time (so the
 * pieces shrink to one unit at the end), then takes from the other ranges in the same way. So:
 *  - the threads that run do the work: a thread the OS has not scheduled (more threads than cores, a
 *    busy machine) holds back nothing, its range is taken by the others, and the caller waits only
 *    for pieces already being stepped;
 *  - a thread steps the same envs step after step unless it had to take over someone else's, so they
 *    stay in its core's cache;
 *  - each range's counter sits on its own cache line, taken by its owner without contention; a thread
 *    subtracts what it finished from the shared `remaining` count once for all of its own range, and
 *    once per piece it takes over from another's.
 * Which thread steps an env never changes its result (each env has its own RNG).
 *
 * Units are sized by measured cost: the caller times its own range (every 8th job), and a unit aims at
 * POOL_UNIT_NS of work, so threads finish within about one unit of each other. The same figure decides how many
 * sleeping workers a job is worth waking: one per POOL_WAKE_NS of work (a wake-up costs a syscall,
 * and a worker that arrives after the work is done costs CPU for nothing).
 *
 * Waiting, in three stages: spin on the job number for at most POOL_SPIN_NS (a step that follows quickly,
 * the usual case in a benchmark loop, costs no syscall), then sched_yield a few times (a thread that
 * holds a piece gets the core), then sleep on a futex: one word for all workers, woken once per job by
 * the caller with the count it wants. Spinning only pays when every thread has a core of its own, so
 * with more threads than usable cores nobody spins, and at most as many threads as there are cores
 * are woken for a job (the others sleep: they could only take turns on the cores).
 */

#include <sched.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define POOL_SPIN_NS 50000    /* spin this long before yielding (when threads <= usable cores) */
#define POOL_YIELDS 8         /* then this many sched_yield before sleeping */
#define POOL_UNITS 64         /* at most this many units per range (before the cost is known: 16) */
#define POOL_UNIT_NS 2000     /* a unit aims at this much work */
#define POOL_WAKE_NS 20000    /* wake one sleeping worker per this much work in the job */

/* -DPOOL_STATS: count futex calls, yields and pieces per thread (envs/pool_bench.c reads them). Off by
 * default: the counting itself costs a little on every step. */
enum { STAT_FUTEX_WAIT, STAT_FUTEX_WAKE, STAT_YIELD, STAT_CALLER_CHUNKS, STAT_WORKER_CHUNKS, STAT_COUNT };
typedef struct PoolStat {
    _Alignas(64) unsigned long long n[STAT_COUNT]; /* one cache line per thread: no false sharing */
} PoolStat;
#ifdef POOL_STATS
#define COUNT(pool, thread, what) ((pool)->stats[(thread)].n[(what)]++)
#else
#define COUNT(pool, thread, what) ((void)0)
#endif

/* One thread's home range of the current job: job number (32 bits) | next unit (16) | units (16),
 * taken by CAS, so a thread that comes late can never take a unit of a later job. */
typedef struct Range {
    _Alignas(64) atomic_ullong word;
} Range;

struct ThreadPool {
    int num_threads;
    int cpus;                   /* usable cores when the pool was made (affinity, cgroup quota) */
    int spin;                   /* 1: spin before sleeping; 0 when threads > cpus */
    int wake;                   /* most threads woken per job: min(num_threads, cpus) - 1 */
    pthread_t* threads;
    Range* ranges;              /* [num_threads] */
    /* the job, written by the caller before it publishes the ranges; a thread reads it only while it
     * holds units it has not finished, so the job cannot end and these cannot change meanwhile */
    RangeFn fn;
    void* ctx;
    int count;
    /* the caller's own, on a line of its own (written every job): what the last job of `cost_fn` cost
     * per item in ns, 0 before one was timed */
    _Alignas(64) RangeFn cost_fn;
    double ns_per_item;
    _Alignas(64) atomic_int remaining;  /* units not finished yet; the caller sleeps on it (futex) */
    atomic_int caller_sleeping;
    _Alignas(64) atomic_uint job;       /* job number; idle threads sleep on it (futex) */
    atomic_int sleepers;
    atomic_int shutdown;
#ifdef POOL_STATS
    PoolStat* stats; /* [num_threads], the caller's at 0 */
#endif
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

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sleep while *addr == expected (returns at once if it differs); wake up to n sleepers. */
static void futex_wait(void* addr, unsigned expected) {
#if defined(__linux__)
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
    (void)addr;
    (void)expected;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
#endif
}

static void futex_wake(void* addr, int n) {
#if defined(__linux__)
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
    (void)addr;
    (void)n;
#endif
}

/* Cores this process may use at once: its affinity mask, capped by a cgroup CPU quota (docker --cpus). */
static int usable_cpus(void) {
    int cpus = 0;
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
#endif
    if (cpus < 1) cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    double quota = -1, period = -1;
    FILE* f = fopen("/sys/fs/cgroup/cpu.max", "r"); /* cgroup v2: "max 100000" or "200000 100000" */
    if (f) {
        if (fscanf(f, "%lf %lf", &quota, &period) != 2) quota = -1;
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) { /* cgroup v1 */
        if (fscanf(f, "%lf", &quota) != 1) quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lf", &period) != 1) period = -1;
            fclose(f);
        }
    }
    if (quota > 0 && period > 0) {
        int limit = (int)((quota + period - 1) / period);
        if (limit >= 1 && limit < cpus) cpus = limit;
    }
    return cpus;
}

static inline unsigned long long make_word(unsigned job, unsigned next, unsigned units) {
    return ((unsigned long long)job << 32) | ((unsigned long long)next << 16) | units;
}

/* Units of range r: `want`, or its length when shorter (a unit holds at least one item). */
static inline unsigned range_units(int count, int threads, int r, int want) {
    long long len = (long long)count * (r + 1) / threads - (long long)count * r / threads;
    return len < want ? (unsigned)len : (unsigned)want;
}

/* Take half of what is left of range r in job `job` (at least one unit): returns the units taken
 * (0: none left, or another job) and the first of them in *first, the range's unit count in *units. */
static int take(ThreadPool* pool, int r, unsigned job, unsigned* first, unsigned* units) {
    atomic_ullong* word = &pool->ranges[r].word;
    unsigned long long w = atomic_load_explicit(word, memory_order_acquire);
    for (;;) {
        unsigned next = (unsigned)(w >> 16) & 0xFFFF, total = (unsigned)w & 0xFFFF;
        if ((unsigned)(w >> 32) != job || next >= total) return 0;
        unsigned n = (total - next + 1) / 2;
        if (atomic_compare_exchange_weak_explicit(word, &w, w + ((unsigned long long)n << 16), memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *first = next;
            *units = total;
            return (int)n;
        }
    }
}

/* Run units [first, first + n) of range r (out of `units`), which this thread holds; returns the items. */
static int run_units(ThreadPool* pool, int r, unsigned first, int n, unsigned units) {
    long long count = pool->count, threads = pool->num_threads;
    long long lo = count * r / threads, len = count * (r + 1) / threads - lo;
    int start = (int)(lo + len * first / units), end = (int)(lo + len * (first + (unsigned)n) / units);
    if (end > start) pool->fn(pool->ctx, start, end);
    return end - start;
}

/* Units finished: the last one wakes the caller if it went to sleep. */
static void finished(ThreadPool* pool, int self, int n) {
    (void)self; /* used by COUNT under POOL_STATS */
    if (atomic_fetch_sub(&pool->remaining, n) == n && atomic_load(&pool->caller_sleeping)) {
        COUNT(pool, self, STAT_FUTEX_WAKE);
        futex_wake(&pool->remaining, 1);
    }
}

/* Do what there is of job `job`: the own range first, then the others' from the next thread on. With
 * `cost` (the caller), time the own range: cost[0] items in cost[1] ns. */
static void work(ThreadPool* pool, unsigned job, int self, long long* cost) {
    int threads = pool->num_threads, n, done = 0;
    unsigned first, units;
    long long start = cost ? now_ns() : 0, items = 0;
    while ((n = take(pool, self, job, &first, &units)) > 0) {
        COUNT(pool, self, self ? STAT_WORKER_CHUNKS : STAT_CALLER_CHUNKS);
        items += run_units(pool, self, first, n, units);
        done += n;
    }
    if (cost) {
        cost[0] = items;
        cost[1] = now_ns() - start;
    }
    if (done) finished(pool, self, done); /* from here the job may be over: only its words are read */
    for (int i = 1; i < threads; i++) {
        int r = self + i < threads ? self + i : self + i - threads;
        while ((n = take(pool, r, job, &first, &units)) > 0) {
            COUNT(pool, self, self ? STAT_WORKER_CHUNKS : STAT_CALLER_CHUNKS);
            run_units(pool, r, first, n, units);
            finished(pool, self, n);
        }
    }
}

/* Wait for a job other than `seen` (or shutdown): spin, yield, then sleep on the futex. */
static unsigned wait_job(ThreadPool* pool, unsigned seen, int self) {
    (void)self; /* used by COUNT under POOL_STATS */
    unsigned job;
    if (pool->spin) {
        long long deadline = now_ns() + POOL_SPIN_NS;
        for (int i = 1;; i++) {
            job = atomic_load_explicit(&pool->job, memory_order_acquire);
            if (job != seen || atomic_load_explicit(&pool->shutdown, memory_order_relaxed)) return job;
            cpu_relax();
            if ((i & 63) == 0 && now_ns() > deadline) break;
        }
    }
    for (int i = 0; i < POOL_YIELDS; i++) {
        job = atomic_load_explicit(&pool->job, memory_order_acquire);
        if (job != seen || atomic_load_explicit(&pool->shutdown, memory_order_relaxed)) return job;
        COUNT(pool, self, STAT_YIELD);
        sched_yield();
    }
    for (;;) {
        atomic_fetch_add(&pool->sleepers, 1); /* seq_cst: pairs with the caller's job store, then sleepers load */
        job = atomic_load(&pool->job);
        if (job == seen && !atomic_load(&pool->shutdown)) {
            COUNT(pool, self, STAT_FUTEX_WAIT);
            futex_wait(&pool->job, seen);
        }
        atomic_fetch_sub(&pool->sleepers, 1);
        job = atomic_load(&pool->job);
        if (job != seen || atomic_load(&pool->shutdown)) return job;
    }
}

static void* worker_main(void* raw) {
    WorkerArg* arg = (WorkerArg*)raw;
    ThreadPool* pool = arg->pool;
    int self = arg->index;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned job = wait_job(pool, seen, self);
        if (atomic_load(&pool->shutdown)) break;
        seen = job;
        work(pool, job, self, NULL);
    }
    return NULL;
}

ThreadPool* pool_create(int num_threads) {
    if (num_threads < 1) num_threads = 1;
    ThreadPool* pool = aligned_alloc(64, (sizeof(ThreadPool) + 63) & ~(size_t)63);
    if (!pool) return NULL;
    memset(pool, 0, sizeof(ThreadPool));
    pool->num_threads = num_threads;
    pool->cpus = usable_cpus();
    pool->spin = num_threads <= pool->cpus;
    pool->wake = (num_threads < pool->cpus ? num_threads : pool->cpus) - 1;
    atomic_init(&pool->remaining, 0);
    atomic_init(&pool->caller_sleeping, 0);
    atomic_init(&pool->job, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->shutdown, 0);
    pool->threads = calloc((size_t)num_threads, sizeof(pthread_t));
    pool->ranges = aligned_alloc(64, (size_t)num_threads * sizeof(Range));
#ifdef POOL_STATS
    pool->stats = aligned_alloc(64, (size_t)num_threads * sizeof(PoolStat));
    if (pool->stats) memset(pool->stats, 0, (size_t)num_threads * sizeof(PoolStat));
    int stats_ok = pool->stats != NULL;
#else
    int stats_ok = 1;
#endif
    if (!pool->threads || !pool->ranges || !stats_ok) {
        pool->num_threads = 1; /* no worker to join */
        pool_destroy(pool);
        return NULL;
    }
    for (int i = 0; i < num_threads; i++) atomic_init(&pool->ranges[i].word, 0); /* job 0: none */
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
    int threads = pool->num_threads;
    if (threads == 1 || count <= 1) {
        fn(ctx, 0, count);
        return;
    }
    /* units per range by measured cost (fn's last job), else a default; at most one item a unit */
    double per_range = (double)count / threads, units = POOL_UNITS / 4;
    double cost = fn == pool->cost_fn ? pool->ns_per_item : 0.0;
    if (cost > 0) units = per_range * cost / POOL_UNIT_NS;
    int want = units < 1 ? 1 : units > POOL_UNITS ? POOL_UNITS : (int)units;
    pool->fn = fn;
    pool->ctx = ctx;
    pool->count = count;
    unsigned job = atomic_load_explicit(&pool->job, memory_order_relaxed) + 1;
    /* every range holds count / threads items or one more: `want` units each, or one unit per item */
    int even = count / threads >= want;
    /* the count first: a thread that takes a unit (acquiring its range's word) then sees it */
    atomic_store_explicit(&pool->remaining, even ? threads * want : count, memory_order_relaxed);
    for (int r = 0; r < threads; r++) {
        unsigned units = even ? (unsigned)want : range_units(count, threads, r, want);
        atomic_store_explicit(&pool->ranges[r].word, make_word(job, 0, units), memory_order_release);
    }
    atomic_store(&pool->job, job); /* seq_cst: pairs with a sleeper's sleepers++, then job load */
    int sleepers = atomic_load(&pool->sleepers);
    if (sleepers > 0 && pool->wake > 0) {
        /* one worker per POOL_WAKE_NS of work (all of them before the cost is known) */
        double worth = cost > 0 ? count * cost / POOL_WAKE_NS : pool->wake;
        int n = sleepers < pool->wake ? sleepers : pool->wake;
        if (worth < n) n = (int)worth;
        if (n > 0) {
            COUNT(pool, 0, STAT_FUTEX_WAKE);
            futex_wake(&pool->job, n);
        }
    }
    long long timed[2] = {0, 0};
    work(pool, job, 0, cost == 0 || (job & 7) == 0 ? timed : NULL); /* two clock reads, every 8th job */
    if (timed[0] > 0) {
        double ns = (double)timed[1] / (double)timed[0];
        pool->ns_per_item = fn == pool->cost_fn && pool->ns_per_item > 0 ? 0.75 * pool->ns_per_item + 0.25 * ns : ns;
        pool->cost_fn = fn;
    }
    /* wait for pieces other threads are stepping: spin, yield, then sleep */
    long long deadline = pool->spin ? now_ns() + POOL_SPIN_NS : 0;
    int yields = 0;
    for (int i = 1;; i++) {
        int left = atomic_load_explicit(&pool->remaining, memory_order_acquire);
        if (left == 0) return;
        if (pool->spin && ((i & 63) != 0 || now_ns() < deadline)) {
            cpu_relax();
            continue;
        }
        if (yields < POOL_YIELDS) {
            yields++;
            COUNT(pool, 0, STAT_YIELD);
            sched_yield();
            continue;
        }
        atomic_store(&pool->caller_sleeping, 1); /* seq_cst: pairs with the last finisher's check */
        left = atomic_load(&pool->remaining);
        if (left > 0) {
            COUNT(pool, 0, STAT_FUTEX_WAIT);
            futex_wait(&pool->remaining, (unsigned)left);
        }
        atomic_store(&pool->caller_sleeping, 0);
    }
}

void pool_destroy(ThreadPool* pool) {
    if (!pool) return;
    atomic_store(&pool->shutdown, 1);
    atomic_fetch_add(&pool->job, 1);
    futex_wake(&pool->job, 1 << 30);
    for (int i = 1; i < pool->num_threads; i++) pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    free(pool->ranges);
#ifdef POOL_STATS
    free(pool->stats);
#endif
    free(pool);
}

#ifdef POOL_STATS
/* Sums over the threads since the pool was made, in enum order (futex waits, futex wakes, yields, pieces
 * the caller took, pieces workers took); read while no job runs. */
void pool_stats(ThreadPool* pool, unsigned long long* out, int n) {
    for (int k = 0; k < n; k++) out[k] = 0;
    for (int t = 0; t < pool->num_threads; t++)
        for (int k = 0; k < n && k < STAT_COUNT; k++) out[k] += pool->stats[t].n[k];
}
#endif

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
    if (spec->vec_init && spec->vec_init(vec->envs, num_envs, params, err, err_size) != 0) {
        free(vec->envs);
        free(vec);
        return NULL;
    }
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
        if (vec->spec->vec_close) vec->spec->vec_close(vec->envs, vec->num_envs);
        free(vec->envs);
    }
    free(vec);
}
