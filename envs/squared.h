/* squared: the smallest useful Ocean env. An agent on an odd-sized grid (11x11 by default)
 * starts in the centre and must reach a target placed at random.
 *   obs      uint8[size*size]: 0 empty, 1 agent, 2 target
 *   action   Discrete(5): 0 stay, 1 down, 2 up, 3 left, 4 right
 *   reward   +1 on reaching the target, which ends the episode. Walls block: a move off the grid
 *            stays put. An episode that runs out of time (3*size ticks) is truncated with reward 0.
 *   perf     1 for an episode that reached the target, else 0.
 */
#include "vecenv.h"

typedef struct SquaredLog {
    float perf, score, episode_return, episode_length, n;
} SquaredLog;

typedef struct Squared {
    SquaredLog log;
    Rng rng;
    uint8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int size, max_ticks;
    int tick, row, col, target_row, target_col;
    float episode_return;
} Squared;

static const ParamSpec squared_params[] = {
    {"size", 11, 3, 63},
    {NULL, 0, 0, 0},
};

static void squared_layout(const double* p, Layout* out) {
    int size = (int)PARAM(p, 0);
    *out = (Layout){.agents_per_env = 1, .obs_size = size * size, .obs_dtype = OBS_UINT8, .obs_low = 0,
                    .obs_high = 2, .action_dims = 1, .action_n = {5}, .frame_h = size * 16,
                    .frame_w = size * 16, .text_h = size, .text_w = size};
}

static void squared_init(Squared* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->size = (int)PARAM(p, 0) | 1; /* odd, so there is a centre */
    if (env->size > 63) env->size = 63;
    env->max_ticks = 3 * env->size;
}

static void squared_observe(Squared* env) {
    int n = env->size;
    memset(env->observations, 0, (size_t)n * n);
    env->observations[env->target_row * n + env->target_col] = 2;
    env->observations[env->row * n + env->col] = 1;
}

static void squared_reset(Squared* env) {
    int n = env->size;
    env->tick = 0;
    env->episode_return = 0;
    env->row = env->col = n / 2;
    do {
        env->target_row = (int)rng_below(&env->rng, (uint32_t)n);
        env->target_col = (int)rng_below(&env->rng, (uint32_t)n);
    } while (env->target_row == env->row && env->target_col == env->col);
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    squared_observe(env);
}

static void squared_end(Squared* env, float perf) {
    OCEAN_LOG_EPISODE(env->log, perf, env->episode_return, env->episode_return, (float)env->tick);
    /* auto-reset: keep this step's reward and done flags, start the next episode's observation */
    float reward = env->rewards[0];
    uint8_t term = env->terminals[0], trunc = env->truncations[0];
    squared_reset(env);
    env->rewards[0] = reward;
    env->terminals[0] = term;
    env->truncations[0] = trunc;
}

static void squared_step(Squared* env) {
    static const int dr[5] = {0, 1, -1, 0, 0}, dc[5] = {0, 0, 0, -1, 1};
    int a = env->actions[0];
    env->tick++;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    int row = env->row + dr[a], col = env->col + dc[a];
    if (row < 0 || col < 0 || row >= env->size || col >= env->size) {
        row = env->row; /* a wall: stay put */
        col = env->col;
    }
    env->row = row;
    env->col = col;
    if (row == env->target_row && col == env->target_col) {
        env->rewards[0] = 1;
        env->episode_return += 1;
        env->terminals[0] = 1;
        squared_end(env, 1);
        return;
    }
    if (env->tick >= env->max_ticks) {
        env->truncations[0] = 1;
        squared_end(env, 0);
        return;
    }
    squared_observe(env);
}

static void squared_render(Squared* env, uint8_t* rgb) {
    int n = env->size, w = n * 16;
    fill_rect(rgb, w, w, 0, 0, w, w, 20, 20, 30);
    fill_rect(rgb, w, w, env->target_col * 16 + 2, env->target_row * 16 + 2, 12, 12, 60, 200, 80);
    fill_rect(rgb, w, w, env->col * 16 + 2, env->row * 16 + 2, 12, 12, 80, 140, 255);
}

static void squared_render_text(Squared* env, char* text) {
    int n = env->size;
    for (int i = 0; i < n * n; i++) text[i] = '.';
    text[env->target_row * n + env->target_col] = 'T';
    text[env->row * n + env->col] = 'A';
}

static void squared_close(Squared* env) { (void)env; }

OCEAN_ENV(squared, Squared, SquaredLog, "perf", "score", "episode_return", "episode_length", "n")
