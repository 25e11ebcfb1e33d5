/* engine_debug.c: the rollout engine's native loop without Python, for AddressSanitizer,
 * UndefinedBehaviorSanitizer and ThreadSanitizer (tests/test_engine.py builds and runs it).
 *
 * For every env: 8 envs in 1, 2 and 4 buffers, a C policy writing random actions into each buffer's
 * rows; checks that every buffer ran every step, that the history holds what the policy saw, that a
 * failing buffer stops the others and is the one reported, and that an out-of-range action is
 * caught. Also that the CUDA entry points fail with a message where there is no driver.
 *
 *   engine_debug [ENV|all] [STEPS]     exit 0 when every check passes
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "registry.h"

typedef struct Policy {
    Engine* eng;
    const Layout* L;
    int32_t* actions;
    const float* rewards;
    float* seen;          /* [steps, agents]: the rewards each buffer saw at each step */
    int agents, per, steps;
    int fail_buffer, fail_step, bad_action;
    Rng rng[ENGINE_MAX_BUFFERS];
} Policy;

static int policy_step(void* ctx, int b, int t, EngineTimes* times, char* err, size_t err_size) {
    (void)times;
    Policy* p = (Policy*)ctx;
    if (b == p->fail_buffer && t == p->fail_step) {
        snprintf(err, err_size, "buffer %d fails at step %d", b, t);
        return -1;
    }
    int dims = p->L->action_dims;
    for (int r = b * p->per; r < (b + 1) * p->per; r++) {
        if (t < p->steps) p->seen[(size_t)t * p->agents + r] = p->rewards[r];
        for (int d = 0; d < dims; d++)
            p->actions[(size_t)r * dims + d] = (int32_t)rng_below(&p->rng[b], (uint32_t)p->L->action_n[d]);
    }
    if (p->bad_action && b == 0 && t == 3) p->actions[0] = p->L->action_n[0];
    return 0;
}

static int check(const EnvSpec* spec, int steps, int buffers) {
    double params[OCEAN_MAX_PARAMS];
    for (int i = 0; spec->params[i].name; i++) params[i] = spec->params[i].value;
    Layout L;
    memset(&L, 0, sizeof(L));
    spec->layout(params, &L);
    int num_envs = 8, agents = num_envs * L.agents_per_env;
    size_t obs_bytes = (size_t)agents * L.obs_size * ocean_obs_itemsize(L.obs_dtype);
    void* obs = malloc(obs_bytes);
    int32_t* act = calloc((size_t)agents * L.action_dims, sizeof(int32_t));
    float* rew = malloc((size_t)agents * sizeof(float));
    uint8_t *term = malloc((size_t)agents), *trunc = malloc((size_t)agents);
    float* hist = malloc((size_t)steps * agents * sizeof(float));
    uint8_t* dones = malloc((size_t)steps * agents);
    float* seen = malloc((size_t)steps * agents * sizeof(float));
    char err[ENGINE_ERR];
    VecEnv* vec = vecenv_create(spec, params, num_envs, 2, 7, 0, obs, act, rew, term, trunc, err, sizeof(err));
    if (!vec) {
        fprintf(stderr, "%s: create failed: %s\n", spec->name, err);
        return 1;
    }
    vecenv_reset(vec, 7);
    int threads[ENGINE_MAX_BUFFERS];
    for (int b = 0; b < buffers; b++) threads[b] = 1 + b % 2;
    Buffers arrays = {obs, act, rew, term, trunc};
    Engine* eng = engine_create(vec, arrays, buffers, threads, err, sizeof(err));
    int failures = 0;
    if (!eng) {
        fprintf(stderr, "%s: engine_create failed: %s\n", spec->name, err);
        vecenv_close(vec);
        return 1;
    }
    Policy p = {eng, &L, act, rew, seen, agents, agents / buffers, steps, -1, -1, 0, {{0, 0}}};
    for (int b = 0; b < buffers; b++) rng_seed(&p.rng[b], 99, (uint64_t)b);
    EnginePolicy policy = {policy_step, NULL, NULL, &p};
    /* 1. a full horizon: every buffer every step, the history equal to what the policy saw */
    if (engine_start(eng, steps, policy, hist, dones, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: start failed: %s\n", spec->name, err);
        failures++;
    } else {
        while (!engine_wait(eng, 10)) {
        }
        if (engine_join(eng, err, sizeof(err)) != -1) {
            fprintf(stderr, "%s: a buffer failed: %s\n", spec->name, err);
            failures++;
        }
        EngineTimes times[ENGINE_MAX_BUFFERS];
        engine_take_times(eng, times);
        for (int b = 0; b < buffers; b++)
            if (times[b].steps != steps) {
                fprintf(stderr, "%s: buffer %d ran %lld of %d steps\n", spec->name, b, times[b].steps, steps);
                failures++;
            }
        if (memcmp(hist, seen, (size_t)steps * agents * sizeof(float)) != 0) {
            fprintf(stderr, "%s: the rewards history differs from what the policy saw\n", spec->name);
            failures++;
        }
        for (size_t i = 0; i < (size_t)steps * agents; i++)
            if (dones[i] > 1) {
                fprintf(stderr, "%s: done flag %d\n", spec->name, dones[i]);
                failures++;
                break;
            }
    }
    /* 2. the last buffer fails at step 5: it is the one reported, and nobody runs to the end */
    p.fail_buffer = buffers - 1, p.fail_step = 5;
    engine_start(eng, 100000, policy, NULL, NULL, err, sizeof(err));
    engine_wait(eng, 60000);
    int first = engine_join(eng, err, sizeof(err));
    EngineTimes times[ENGINE_MAX_BUFFERS];
    engine_take_times(eng, times);
    if (first != buffers - 1 || engine_failed_step(eng, first) != 5 || strstr(err, "fails at step 5") == NULL) {
        fprintf(stderr, "%s: expected buffer %d to fail at step 5, got %d (%s)\n", spec->name, buffers - 1, first, err);
        failures++;
    }
    for (int b = 0; b < buffers; b++)
        if (times[b].steps >= 100000) {
            fprintf(stderr, "%s: buffer %d was not stopped\n", spec->name, b);
            failures++;
        }
    /* 3. an action out of range is caught before the env steps */
    p.fail_buffer = -1, p.bad_action = 1;
    engine_start(eng, 10, policy, NULL, NULL, err, sizeof(err));
    engine_wait(eng, 60000);
    first = engine_join(eng, err, sizeof(err));
    if (first != 0 || !engine_failed_check(eng, 0) || strstr(err, "out of range") == NULL) {
        fprintf(stderr, "%s: the out-of-range action was not caught (%d: %s)\n", spec->name, first, err);
        failures++;
    }
    engine_take_times(eng, times);
    printf("%-10s %d buffers x %d steps: %s\n", spec->name, buffers, steps, failures ? "FAILED" : "ok");
    engine_destroy(eng);
    vecenv_close(vec);
    free(obs), free(act), free(rew), free(term), free(trunc), free(hist), free(dones), free(seen);
    return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    const char* name = argc > 1 ? argv[1] : "all";
    int steps = argc > 2 ? atoi(argv[2]) : 200;
    int failed = 0, ran = 0;
    for (int i = 0; i < ocean_count(); i++) {
        const EnvSpec* spec = ocean_get(i);
        if (strcmp(name, "all") != 0 && strcmp(name, spec->name) != 0) continue;
        for (int buffers = 1; buffers <= 4; buffers *= 2) failed += check(spec, steps, buffers);
        ran++;
    }
    char err[256];
    if (engine_cuda_load(err, sizeof(err)) != 0 && strstr(err, "libcuda.so.1") == NULL) {
        fprintf(stderr, "no CUDA driver, but the message does not say so: %s\n", err);
        failed++;
    }
    if (!ran) {
        fprintf(stderr, "unknown env '%s'\n", name);
        return 2;
    }
    return failed ? 1 : 0;
}
