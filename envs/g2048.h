/* g2048: the sliding-tile game on a 4x4 board.
 *   obs      uint8[16]: log2 of each tile (0 empty, 1 for a 2, ..., 11 for 2048), row-major.
 *   action   Discrete(4): slide 0 up, 1 down, 2 left, 3 right. A slide that moves nothing is a
 *            wasted turn (reward `invalid_penalty`, no new tile).
 *   reward   for each merge, log2 of the new tile / 16 (so a 2048 merge is worth 0.6875).
 *            The game ends when no slide can move anything; long games are truncated at max_ticks.
 *   score    the classic game score (sum of merged tile values); perf = log2(largest tile) / 11.
 * A new tile (2 with p = 0.9, else 4) appears on a random empty cell after every valid slide.
 */
#include <stdio.h>

#include "vecenv.h"

typedef struct G2048Log {
    float perf, score, episode_return, episode_length, n;
} G2048Log;

typedef struct G2048 {
    G2048Log log;
    Rng rng;
    uint8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int max_ticks;
    float invalid_penalty;
    uint8_t board[16];
    int tick;
    float score, episode_return;
} G2048;

static const ParamSpec g2048_params[] = {
    {"max_ticks", PARAM_INT, 10000, 10, 1000000},
    {"invalid_penalty", PARAM_FLOAT, -0.01, -1, 0},
    {NULL, 0, 0, 0, 0},
};

static void g2048_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = 16, .obs_dtype = OBS_UINT8, .obs_low = 0, .obs_high = 17,
                    .action_dims = 1, .action_n = {4}, .frame_h = 4 * 24, .frame_w = 4 * 24, .text_h = 4, .text_w = 24};
}

static void g2048_init(G2048* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->max_ticks = (int)PARAM(p, 0);
    env->invalid_penalty = (float)PARAM(p, 1);
}

static void g2048_spawn(G2048* env) {
    int empty[16], n = 0;
    for (int i = 0; i < 16; i++)
        if (!env->board[i]) empty[n++] = i;
    if (!n) return;
    env->board[empty[rng_below(&env->rng, (uint32_t)n)]] = rng_below(&env->rng, 10) == 0 ? 2 : 1;
}

static void g2048_observe(G2048* env) { memcpy(env->observations, env->board, 16); }

static void g2048_reset(G2048* env) {
    memset(env->board, 0, 16);
    env->tick = 0;
    env->score = env->episode_return = 0;
    g2048_spawn(env);
    g2048_spawn(env);
    g2048_observe(env);
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
}

/* Slide one line of 4 cells (indices given in slide order) toward its start; returns merge reward. */
static float g2048_slide_line(G2048* env, const int idx[4], int* moved, float* score) {
    uint8_t out[4] = {0, 0, 0, 0};
    int n = 0, last_merged = 0;
    float reward = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t v = env->board[idx[k]];
        if (!v) continue;
        if (n > 0 && out[n - 1] == v && !last_merged && v < 17) {
            out[n - 1] = (uint8_t)(v + 1);
            reward += (float)(v + 1) / 16.0f;
            *score += (float)(1u << (v + 1));
            last_merged = 1;
        } else {
            out[n++] = v;
            last_merged = 0;
        }
    }
    for (int k = 0; k < 4; k++) {
        uint8_t v = out[k];
        if (env->board[idx[k]] != v) *moved = 1;
        env->board[idx[k]] = v;
    }
    return reward;
}

static float g2048_slide(G2048* env, int dir, int* moved, float* score) {
    float reward = 0;
    for (int line = 0; line < 4; line++) {
        int idx[4];
        for (int k = 0; k < 4; k++) {
            switch (dir) {
                case 0: idx[k] = k * 4 + line; break;       /* up: column, top first */
                case 1: idx[k] = (3 - k) * 4 + line; break; /* down: column, bottom first */
                case 2: idx[k] = line * 4 + k; break;       /* left: row, left first */
                default: idx[k] = line * 4 + 3 - k; break;  /* right: row, right first */
            }
        }
        reward += g2048_slide_line(env, idx, moved, score);
    }
    return reward;
}

static int g2048_can_move(const G2048* env) {
    for (int i = 0; i < 16; i++) {
        if (!env->board[i]) return 1;
        if (i % 4 < 3 && env->board[i] == env->board[i + 1]) return 1;
        if (i < 12 && env->board[i] == env->board[i + 4]) return 1;
    }
    return 0;
}

static void g2048_step(G2048* env) {
    int moved = 0;
    float reward = g2048_slide(env, env->actions[0], &moved, &env->score);
    if (moved) g2048_spawn(env);
    else reward = env->invalid_penalty;
    env->tick++;
    env->episode_return += reward;
    int done = !g2048_can_move(env);
    int truncated = !done && env->tick >= env->max_ticks;
    if (done || truncated) {
        uint8_t top = 0;
        for (int i = 0; i < 16; i++)
            if (env->board[i] > top) top = env->board[i];
        float perf = (float)top / 11.0f;
        OCEAN_LOG_EPISODE(env->log, perf > 1 ? 1 : perf, env->score, env->episode_return, (float)env->tick);
    }
    OCEAN_END_STEP(env, done, truncated, reward, g2048_reset, g2048_observe);
}

static void g2048_render(G2048* env, uint8_t* rgb) {
    for (int i = 0; i < 16; i++) {
        uint8_t v = env->board[i];
        uint8_t shade = (uint8_t)(v ? 255 - v * 14 : 60);
        fill_rect(rgb, 96, 96, (i % 4) * 24 + 1, (i / 4) * 24 + 1, 22, 22, v ? 240 : 60, shade, v ? 120 - v * 5 : 60);
    }
}

static void g2048_render_text(G2048* env, char* text) {
    for (int i = 0; i < 16; i++) {
        char cell[8];
        unsigned v = env->board[i] ? 1u << env->board[i] : 0;
        int len = v ? snprintf(cell, sizeof(cell), "%6u", v) : snprintf(cell, sizeof(cell), "     .");
        memcpy(text + (i / 4) * 24 + (i % 4) * 6, cell, (size_t)(len > 6 ? 6 : len));
    }
}

static void g2048_close(G2048* env) { (void)env; }

OCEAN_ENV(g2048, G2048, G2048Log, "perf", "score", "episode_return", "episode_length", "n")
