/* squared: PufferLib 3.0's Ocean squared rules. An agent on an 11x11 grid starts in the centre and
 * must reach a target placed at random on another cell.
 *   obs      uint8[size*size]: 0 empty, 1 agent, 2 target
 *   action   Discrete(5): 0 stay, 1 down, 2 up, 3 left, 4 right
 *   reward   +1 on reaching the target; -1 for stepping off the grid or for running out of time
 *            (more than 3*size steps). Each of these ends the episode (a terminal, as in PufferLib).
 *   perf     1 for an episode that reached the target, else 0.
 */
#include "vecenv.h"

typedef struct SquaredLog {
    float perf, score, episode_return, episode_length, n;
} SquaredLog;

typedef struct Squared {
    /* what every step touches first, in one cache line; the log and RNG only at an episode's end */
    uint8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    int size, max_ticks;
    int tick, row, col, pos, target; /* pos = row * size + col */
    uint8_t* truncations;
    Rng rng;
    SquaredLog log;
} Squared;

static const ParamSpec squared_params[] = {
    {"size", PARAM_INT, 11, 3, 63},
    {NULL, 0, 0, 0, 0},
};

static void squared_layout(const double* p, Layout* out) {
    int size = (int)PARAM(p, 0) | 1;
    if (size > 63) size = 63;
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

/* The whole grid is written here; a step only rewrites the two cells that change. */
static void squared_reset(Squared* env) {
    int n = env->size, tiles = n * n, centre = tiles / 2;
    env->tick = 0;
    env->row = env->col = n / 2;
    env->pos = centre;
    uint32_t t = rng_below(&env->rng, (uint32_t)(tiles - 1)); /* any cell but the centre */
    if ((int)t >= centre) t++;
    env->target = (int)t;
    memset(env->observations, 0, (size_t)tiles);
    env->observations[t] = 2;
    env->observations[centre] = 1;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
}

static void squared_step(Squared* env) {
    static const int8_t dr[5] = {0, 1, -1, 0, 0}, dc[5] = {0, 0, 0, -1, 1};
    /* locals first: the byte stores into the observation may alias anything, so fields read after
     * them would be loaded again */
    uint8_t* obs = env->observations;
    float* rewards = env->rewards;
    uint8_t* terminals = env->terminals;
    int a = env->actions[0], n = env->size, tick = env->tick + 1;
    int row = env->row + dr[a], col = env->col + dc[a], pos = row * n + col;
    int out = tick > env->max_ticks || (unsigned)row >= (unsigned)n || (unsigned)col >= (unsigned)n;
    if (out || pos == env->target) {
        float reward = out ? -1.0f : 1.0f;
        env->tick = tick;
        OCEAN_LOG_EPISODE(env->log, out ? 0.0f : 1.0f, reward, reward, (float)tick);
        squared_reset(env);
        terminals[0] = 1;
        rewards[0] = reward;
        return;
    }
    rewards[0] = 0;
    terminals[0] = 0;
    env->tick = tick;
    env->row = row;
    env->col = col;
    obs[env->pos] = 0;
    obs[pos] = 1;
    env->pos = pos;
}

static void squared_render(Squared* env, uint8_t* rgb) {
    int n = env->size, w = n * 16;
    fill_rect(rgb, w, w, 0, 0, w, w, 20, 20, 30);
    fill_rect(rgb, w, w, (env->target % n) * 16 + 2, (env->target / n) * 16 + 2, 12, 12, 60, 200, 80);
    fill_rect(rgb, w, w, env->col * 16 + 2, env->row * 16 + 2, 12, 12, 80, 140, 255);
}

static void squared_render_text(Squared* env, char* text) {
    int n = env->size;
    for (int i = 0; i < n * n; i++) text[i] = '.';
    text[env->target] = 'T';
    text[env->row * n + env->col] = 'A';
}

static void squared_close(Squared* env) { (void)env; }

OCEAN_ENV(squared, Squared, SquaredLog, "perf", "score", "episode_return", "episode_length", "n")
