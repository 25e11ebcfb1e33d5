/* benchmark: a synthetic env for probing vectorization and bandwidth limits, not for learning.
 *   obs      uint8[obs_bytes], every byte rewritten each step (the bandwidth an env of that size costs).
 *   action   Discrete(4), ignored beyond being checked.
 *   compute   `work` rounds of RNG arithmetic per step stand in for env logic.
 *   reward   uniform in [0, 1); episodes end after `episode_length` steps (terminal).
 *   perf     mean reward of the episode.
 */
#include "vecenv.h"

#define BENCH_MAX_OBS 65536

typedef struct BenchmarkLog {
    float perf, score, episode_return, episode_length, n;
} BenchmarkLog;

typedef struct Benchmark {
    BenchmarkLog log;
    Rng rng;
    uint8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int obs_bytes, work, episode_length, tick;
    float episode_return;
    uint32_t acc;
} Benchmark;

static const ParamSpec benchmark_params[] = {
    {"obs_bytes", PARAM_INT, 128, 1, BENCH_MAX_OBS},
    {"work", PARAM_INT, 16, 0, 1000000},
    {"episode_length", PARAM_INT, 128, 1, 1000000},
    {NULL, 0, 0, 0, 0},
};

static void benchmark_layout(const double* p, Layout* out) {
    *out = (Layout){.agents_per_env = 1, .obs_size = (int)PARAM(p, 0), .obs_dtype = OBS_UINT8, .obs_low = 0,
                    .obs_high = 255, .action_dims = 1, .action_n = {4}, .frame_h = 16, .frame_w = 64,
                    .text_h = 1, .text_w = 32};
}

static void benchmark_init(Benchmark* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->obs_bytes = (int)PARAM(p, 0);
    env->work = (int)PARAM(p, 1);
    env->episode_length = (int)PARAM(p, 2);
}

static void benchmark_observe(Benchmark* env) {
    /* 8 bytes at a time from one RNG draw, so the cost is the memory traffic, not the generator */
    uint64_t x = ((uint64_t)rng_u32(&env->rng) << 32) | env->acc;
    int n = env->obs_bytes, i = 0;
    for (; i + 8 <= n; i += 8) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        memcpy(env->observations + i, &x, 8);
    }
    for (; i < n; i++) env->observations[i] = (uint8_t)(x >> (8 * (i & 7)));
}

static void benchmark_reset(Benchmark* env) {
    env->tick = 0;
    env->episode_return = 0;
    env->acc = 0;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    benchmark_observe(env);
}

static void benchmark_step(Benchmark* env) {
    uint32_t acc = env->acc + (uint32_t)env->actions[0];
    for (int i = 0; i < env->work; i++) acc = acc * 1664525u + rng_u32(&env->rng);
    env->acc = acc;
    float reward = rng_float(&env->rng);
    env->tick++;
    env->episode_return += reward;
    env->rewards[0] = reward;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    if (env->tick >= env->episode_length) {
        OCEAN_LOG_EPISODE(env->log, env->episode_return / (float)env->tick, env->episode_return, env->episode_return, (float)env->tick);
        benchmark_reset(env);
        env->rewards[0] = reward;
        env->terminals[0] = 1;
        return;
    }
    benchmark_observe(env);
}

static void benchmark_render(Benchmark* env, uint8_t* rgb) {
    for (int i = 0; i < 16 * 64 && i < env->obs_bytes; i++) {
        uint8_t v = env->observations[i];
        rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = v;
    }
}

static void benchmark_render_text(Benchmark* env, char* text) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16 && i < env->obs_bytes; i++) {
        text[2 * i] = hex[env->observations[i] >> 4];
        text[2 * i + 1] = hex[env->observations[i] & 15];
    }
}

static void benchmark_close(Benchmark* env) { (void)env; }

OCEAN_ENV(benchmark, Benchmark, BenchmarkLog, "perf", "score", "episode_return", "episode_length", "n")
