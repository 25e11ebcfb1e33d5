/* debug.c: a standalone binary that steps Ocean envs with random actions, for AddressSanitizer and
 * UndefinedBehaviorSanitizer (make env-debug ENV=name). It checks what the Python tests check at
 * the C level: observations inside their documented bounds and finite, done flags 0/1, rewards
 * finite, renders writing inside their frames, and episodes ending.
 *
 *   debug [ENV|all] [STEPS] [NUM_ENVS] [THREADS]     exit 0 when every check passes
 */
#include <stdio.h>
#include <stdlib.h>

#include "registry.h"
#include "vecenv.h"

static int check_env(const EnvSpec* spec, int steps, int num_envs, int threads) {
    double params[OCEAN_MAX_PARAMS];
    int np = 0;
    while (spec->params[np].name) {
        params[np] = spec->params[np].value;
        np++;
    }
    Layout L;
    memset(&L, 0, sizeof(L));
    spec->layout(params, &L);
    size_t rows = (size_t)num_envs * L.agents_per_env;
    size_t obs_bytes = rows * L.obs_size * ocean_obs_itemsize(L.obs_dtype);
    /* exact-size heap buffers, so ASan catches a write one past any row */
    void* obs = malloc(obs_bytes);
    int32_t* act = malloc(rows * L.action_dims * sizeof(int32_t));
    float* rew = malloc(rows * sizeof(float));
    uint8_t* term = malloc(rows);
    uint8_t* trunc = malloc(rows);
    memset(obs, 0xAB, obs_bytes); /* poison: reset must write every observation */
    char err[256];
    VecEnv* vec = vecenv_create(spec, params, num_envs, threads, 7, 0, obs, act, rew, term, trunc, err, sizeof(err));
    if (!vec) {
        fprintf(stderr, "%s: create failed: %s\n", spec->name, err);
        return 1;
    }
    vecenv_reset(vec, 7);
    Rng rng;
    rng_seed(&rng, 1234, 0);
    uint8_t* frame = malloc((size_t)L.frame_h * L.frame_w * 3);
    char* text = malloc((size_t)L.text_h * L.text_w);
    float logs[OCEAN_MAX_LOG_FIELDS];
    double episodes = 0;
    int failures = 0;
    for (int s = 0; s < steps && failures < 5; s++) {
        for (size_t r = 0; r < rows; r++)
            for (int d = 0; d < L.action_dims; d++) act[r * L.action_dims + d] = (int32_t)rng_below(&rng, (uint32_t)L.action_n[d]);
        vecenv_step(vec);
        for (size_t i = 0; i < rows * L.obs_size && failures < 5; i++) {
            double v = L.obs_dtype == OBS_FLOAT32 ? ((float*)obs)[i]
                       : L.obs_dtype == OBS_INT8  ? ((int8_t*)obs)[i]
                                                  : ((uint8_t*)obs)[i];
            int tail = (int)(i % L.obs_size) >= L.obs_size - L.obs_tail;
            float lo = tail ? L.tail_low : L.obs_low, hi = tail ? L.tail_high : L.obs_high;
            if (!(v >= lo && v <= hi)) {
                fprintf(stderr, "%s: step %d obs[%zu] = %g outside [%g, %g]\n", spec->name, s, i, v, lo, hi);
                failures++;
            }
        }
        for (size_t r = 0; r < rows; r++) {
            if (term[r] > 1 || trunc[r] > 1 || !isfinite(rew[r])) {
                fprintf(stderr, "%s: step %d row %zu: terminal %d truncation %d reward %g\n", spec->name, s, r, term[r], trunc[r], rew[r]);
                failures++;
            }
        }
        if (s % 97 == 0) {
            spec->render(vec->envs, frame);
            spec->render_text(vec->envs, text);
        }
        if (s % 500 == 499) {
            vecenv_log(vec, logs);
            episodes += logs[spec_log_n(spec)];
        }
    }
    vecenv_log(vec, logs);
    episodes += logs[spec_log_n(spec)];
    if (episodes < 1) {
        fprintf(stderr, "%s: no episode ended in %d steps of %d envs\n", spec->name, steps, num_envs);
        failures++;
    }
    printf("%-10s %d steps x %d envs (%d threads): %.0f episodes, %s\n", spec->name, steps, num_envs, vec->num_threads,
           episodes, failures ? "FAILED" : "ok");
    vecenv_close(vec);
    free(obs), free(act), free(rew), free(term), free(trunc), free(frame), free(text);
    return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    const char* name = argc > 1 ? argv[1] : "all";
    int steps = argc > 2 ? atoi(argv[2]) : 3000;
    int num_envs = argc > 3 ? atoi(argv[3]) : 8;
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    int failed = 0, ran = 0;
    for (int i = 0; i < ocean_count(); i++) {
        const EnvSpec* spec = ocean_get(i);
        if (strcmp(name, "all") != 0 && strcmp(name, spec->name) != 0) continue;
        failed += check_env(spec, steps, num_envs, threads);
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "unknown env '%s'; known:", name);
        for (int i = 0; i < ocean_count(); i++) fprintf(stderr, " %s", ocean_get(i)->name);
        fprintf(stderr, "\n");
        return 2;
    }
    return failed ? 1 : 0;
}
