/* pool_bench.c: what the thread pool costs per vector step, without Python (tools/pool_overhead.py
 * builds it against two versions of vecenv.c and runs them in turns).
 *
 * For one env, env count and thread count it times every step, in interleaved blocks of BLOCK_MS:
 *   work   the env's step_many over every env on this thread alone, no pool: the env work of a step
 *   step   vecenv_step through the pool with THREADS threads
 *   empty  pool_run of a function that does nothing, over the same count: dispatch, wake-up and join
 * and prints one JSON line: the 10th percentile of each kind's step times in ns (on a shared machine
 * the steps that nothing else interrupted: other load only adds time), the median as *_p50_ns, and
 *   overhead_ns = step - work / THREADS   (what a step costs beyond a perfect split of the env work)
 * and step_cpu_ns, the CPU time of the whole process per step in the step blocks (spinning counts, so
 * does the gap).
 * GAP_US > 0 spins that long on the caller between steps (the policy's turn in a rollout), outside
 * the timed part: the workers have gone to sleep by then, so every step pays their wake-up.
 * Built with -DPOOL_STATS (a vecenv.c that has pool_stats), it adds futex and yield calls per step.
 *
 *   pool_bench ENV NUM_ENVS THREADS [SECONDS] [GAP_US] [name=value ...]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "registry.h"
#include "vecenv.h"

#define BLOCK_MS 20
#define MAX_SAMPLES (1 << 20) /* step times kept per kind */

/* Present in a vecenv.c built with -DPOOL_STATS; NULL (weak) in one without, e.g. an older commit's. */
extern void pool_stats(ThreadPool* pool, unsigned long long* out, int n) __attribute__((weak));

static long long clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void spin_us(int us) {
    long long end = now_ns() + (long long)us * 1000;
    while (now_ns() < end) {
    }
}

static void nothing(void* ctx, int start, int end) { (void)ctx, (void)start, (void)end; }

static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

typedef enum { WORK, STEP, EMPTY, KINDS } What;

typedef struct Samples {
    float* ns;          /* each step's time */
    long long n;        /* steps taken (at most MAX_SAMPLES of them kept) */
    long long cpu;      /* process CPU time over this kind's blocks, gaps included */
} Samples;

static double percentile(Samples* s, double q) {
    long long n = s->n < MAX_SAMPLES ? s->n : MAX_SAMPLES;
    qsort(s->ns, (size_t)n, sizeof(float), cmp_float);
    return n ? s->ns[(long long)(q * (double)(n - 1))] : 0.0;
}

/* One block: steps of one kind for about BLOCK_MS, each timed alone (the gap excluded). */
static void block(VecEnv* vec, What what, int gap_us, Samples* s) {
    long long wall_end = now_ns() + BLOCK_MS * 1000000LL, cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    do {
        if (gap_us > 0) spin_us(gap_us);
        long long t0 = now_ns();
        if (what == WORK)
            vec->spec->step_many(vec->envs, vec->num_envs);
        else if (what == STEP)
            vecenv_step(vec);
        else
            pool_run(vec->pool, nothing, NULL, vec->num_envs);
        long long t = now_ns() - t0;
        if (s->n < MAX_SAMPLES) s->ns[s->n] = (float)t;
        s->n++;
    } while (now_ns() < wall_end);
    s->cpu += clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
}

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ENV NUM_ENVS THREADS [SECONDS] [GAP_US] [name=value ...]\n", argv[0]);
        return 2;
    }
    const EnvSpec* spec = ocean_find(argv[1]);
    if (!spec) {
        fprintf(stderr, "unknown env '%s'\n", argv[1]);
        return 2;
    }
    int num_envs = atoi(argv[2]), threads = atoi(argv[3]);
    double seconds = argc > 4 ? atof(argv[4]) : 1.0;
    int gap_us = argc > 5 ? atoi(argv[5]) : 0;
    double params[OCEAN_MAX_PARAMS];
    int np = 0;
    while (spec->params[np].name) {
        params[np] = spec->params[np].value;
        np++;
    }
    for (int a = 6; a < argc; a++) {
        char* eq = strchr(argv[a], '=');
        int found = 0;
        for (int i = 0; eq && i < np; i++) {
            if (strncmp(argv[a], spec->params[i].name, (size_t)(eq - argv[a])) == 0 &&
                spec->params[i].name[eq - argv[a]] == 0) {
                params[i] = atof(eq + 1);
                found = 1;
            }
        }
        if (!found) {
            int len = eq ? (int)(eq - argv[a]) : (int)strlen(argv[a]);
            fprintf(stderr, "%s: no parameter '%.*s'; known:", spec->name, len, argv[a]);
            for (int i = 0; i < np; i++) fprintf(stderr, " %s", spec->params[i].name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    if (num_envs < 1 || threads < 1 || seconds <= 0 || gap_us < 0) {
        fprintf(stderr, "NUM_ENVS and THREADS must be >= 1, SECONDS > 0, GAP_US >= 0\n");
        return 2;
    }
    Layout L;
    memset(&L, 0, sizeof(L));
    spec->layout(params, &L);
    size_t rows = (size_t)num_envs * L.agents_per_env;
    void* obs = aligned_alloc(64, ((rows * L.obs_size * ocean_obs_itemsize(L.obs_dtype)) + 63) & ~(size_t)63);
    int32_t* act = aligned_alloc(64, ((rows * L.action_dims * sizeof(int32_t)) + 63) & ~(size_t)63);
    float* rew = aligned_alloc(64, ((rows * sizeof(float)) + 63) & ~(size_t)63);
    uint8_t* term = aligned_alloc(64, (rows + 63) & ~(size_t)63);
    uint8_t* trunc = aligned_alloc(64, (rows + 63) & ~(size_t)63);
    memset(act, 0, rows * L.action_dims * sizeof(int32_t)); /* action 0 is valid in every env */
    char err[256];
    VecEnv* vec = vecenv_create(spec, params, num_envs, threads, 1, 0, obs, act, rew, term, trunc, err, sizeof(err));
    if (!vec) {
        fprintf(stderr, "%s: %s\n", spec->name, err);
        return 1;
    }
    vecenv_reset(vec, 1);
    static Samples kinds[KINDS];
    for (int k = 0; k < KINDS; k++) kinds[k].ns = malloc(MAX_SAMPLES * sizeof(float));
    for (int w = 0; w < 3; w++) block(vec, STEP, gap_us, &kinds[STEP]); /* warm up: caches, page faults */
    kinds[STEP].n = kinds[STEP].cpu = 0;
    unsigned long long counted[8] = {0}, before[8], after[8];
    int blocks = 0;
    long long end = now_ns() + (long long)(seconds * 1e9);
    while (blocks < 3 || now_ns() < end) {
        for (int k = 0; k < KINDS; k++) { /* the order rotates, so no kind always follows another */
            What what = (What)((k + blocks) % KINDS);
            if (pool_stats && what == STEP) pool_stats(vec->pool, before, 8);
            block(vec, what, gap_us, &kinds[what]);
            if (pool_stats && what == STEP) {
                pool_stats(vec->pool, after, 8);
                for (int i = 0; i < 8; i++) counted[i] += after[i] - before[i];
            }
        }
        blocks++;
    }
    /* p10: the steps the machine's other load did not interrupt (it can only add time); p50 for reference */
    double p10[KINDS], p50[KINDS];
    for (int k = 0; k < KINDS; k++) {
        p10[k] = percentile(&kinds[k], 0.1);
        p50[k] = percentile(&kinds[k], 0.5);
    }
    int t = vec->num_threads;
    printf("{\"env\": \"%s\", \"num_envs\": %d, \"threads\": %d, \"gap_us\": %d, \"steps\": %lld, "
           "\"work_ns\": %.1f, \"step_ns\": %.1f, \"empty_ns\": %.1f, \"overhead_ns\": %.1f, "
           "\"work_p50_ns\": %.1f, \"step_p50_ns\": %.1f, \"empty_p50_ns\": %.1f, \"overhead_p50_ns\": %.1f, "
           "\"step_cpu_ns\": %.1f",
           spec->name, num_envs, t, gap_us, kinds[STEP].n, p10[WORK], p10[STEP], p10[EMPTY], p10[STEP] - p10[WORK] / t,
           p50[WORK], p50[STEP], p50[EMPTY], p50[STEP] - p50[WORK] / t, (double)kinds[STEP].cpu / (double)kinds[STEP].n);
    if (pool_stats) {
        static const char* names[] = {"futex_wait", "futex_wake", "yield", "caller_chunks", "worker_chunks"};
        for (int i = 0; i < 5; i++)
            printf(", \"%s_per_step\": %.3f", names[i], (double)counted[i] / (double)kinds[STEP].n);
    }
    printf("}\n");
    for (int k = 0; k < KINDS; k++) free(kinds[k].ns);
    vecenv_close(vec);
    free(obs), free(act), free(rew), free(term), free(trunc);
    return 0;
}
