/* target: several agents (8 by default) in a unit square, each chasing its own goal
 * (multi-agent: one agent row per agent).
 *   obs      float32[7]: own x, y; goal dx, dy; nearest other agent dx, dy; time left fraction.
 *            Positions in [0, 1], offsets in [-1, 1].
 *   action   MultiDiscrete([3, 3]): x move and y move, each 0 left/down, 1 stay, 2 right/up.
 *   reward   +1 on reaching the goal (a new goal appears at once), -0.05 for bumping into another
 *            agent. Every agent's episode is truncated after max_ticks steps.
 *   perf     goals reached per episode / (max_ticks / 25), capped at 1: 25 steps is about what a
 *            straight run to an average goal takes.
 */
#include "vecenv.h"

#define TARGET_MAX_AGENTS 64
#define TARGET_SPEED 0.03f
#define TARGET_REACH 0.05f
#define TARGET_BUMP 0.03f

typedef struct TargetLog {
    float perf, score, episode_return, episode_length, n;
} TargetLog;

typedef struct Target {
    TargetLog log;
    Rng rng;
    float* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int num_agents, max_ticks, tick;
    float x[TARGET_MAX_AGENTS], y[TARGET_MAX_AGENTS], gx[TARGET_MAX_AGENTS], gy[TARGET_MAX_AGENTS];
    float returns[TARGET_MAX_AGENTS], goals[TARGET_MAX_AGENTS];
} Target;

static const ParamSpec target_params[] = {
    {"num_agents", 8, 1, TARGET_MAX_AGENTS},
    {"max_ticks", 256, 16, 100000},
    {NULL, 0, 0, 0},
};

static void target_layout(const double* p, Layout* out) {
    *out = (Layout){.agents_per_env = (int)PARAM(p, 0), .obs_size = 7, .obs_dtype = OBS_FLOAT32, .obs_low = -1,
                    .obs_high = 1, .action_dims = 2, .action_n = {3, 3}, .frame_h = 128, .frame_w = 128,
                    .text_h = 16, .text_w = 32};
}

static void target_init(Target* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->num_agents = (int)PARAM(p, 0);
    env->max_ticks = (int)PARAM(p, 1);
}

static void target_observe(Target* env) {
    float left = 1.0f - (float)env->tick / env->max_ticks;
    for (int i = 0; i < env->num_agents; i++) {
        float* o = env->observations + (size_t)i * 7;
        float best = 1e9f, ndx = 0, ndy = 0;
        for (int j = 0; j < env->num_agents; j++) {
            if (j == i) continue;
            float dx = env->x[j] - env->x[i], dy = env->y[j] - env->y[i];
            float d = dx * dx + dy * dy;
            if (d < best) {
                best = d;
                ndx = dx;
                ndy = dy;
            }
        }
        o[0] = env->x[i];
        o[1] = env->y[i];
        o[2] = env->gx[i] - env->x[i];
        o[3] = env->gy[i] - env->y[i];
        o[4] = ndx;
        o[5] = ndy;
        o[6] = left;
    }
}

static void target_new_goal(Target* env, int i) {
    env->gx[i] = rng_float(&env->rng);
    env->gy[i] = rng_float(&env->rng);
}

static void target_reset(Target* env) {
    env->tick = 0;
    for (int i = 0; i < env->num_agents; i++) {
        env->x[i] = rng_float(&env->rng);
        env->y[i] = rng_float(&env->rng);
        target_new_goal(env, i);
        env->returns[i] = env->goals[i] = 0;
        env->rewards[i] = 0;
        env->terminals[i] = 0;
        env->truncations[i] = 0;
    }
    target_observe(env);
}

static void target_step(Target* env) {
    env->tick++;
    for (int i = 0; i < env->num_agents; i++) {
        const int32_t* a = env->actions + 2 * i;
        float nx = env->x[i] + (float)(a[0] - 1) * TARGET_SPEED;
        float ny = env->y[i] + (float)(a[1] - 1) * TARGET_SPEED;
        env->x[i] = nx < 0 ? 0 : (nx > 1 ? 1 : nx);
        env->y[i] = ny < 0 ? 0 : (ny > 1 ? 1 : ny);
        float reward = 0;
        float dx = env->gx[i] - env->x[i], dy = env->gy[i] - env->y[i];
        if (dx * dx + dy * dy < TARGET_REACH * TARGET_REACH) {
            reward += 1;
            env->goals[i] += 1;
            target_new_goal(env, i);
        }
        env->rewards[i] = reward;
        env->terminals[i] = 0;
        env->truncations[i] = 0;
    }
    for (int i = 0; i < env->num_agents; i++) {
        for (int j = 0; j < env->num_agents; j++) {
            if (j == i) continue;
            float dx = env->x[j] - env->x[i], dy = env->y[j] - env->y[i];
            if (dx * dx + dy * dy < TARGET_BUMP * TARGET_BUMP) {
                env->rewards[i] -= 0.05f;
                break;
            }
        }
        env->returns[i] += env->rewards[i];
    }
    if (env->tick >= env->max_ticks) {
        float expected = (float)env->max_ticks / 25.0f;
        for (int i = 0; i < env->num_agents; i++) {
            float perf = env->goals[i] / expected;
            OCEAN_LOG_EPISODE(env->log, perf > 1 ? 1 : perf, env->goals[i], env->returns[i], (float)env->tick);
        }
        float rewards[TARGET_MAX_AGENTS];
        memcpy(rewards, env->rewards, sizeof(float) * (size_t)env->num_agents);
        target_reset(env);
        memcpy(env->rewards, rewards, sizeof(float) * (size_t)env->num_agents);
        for (int i = 0; i < env->num_agents; i++) env->truncations[i] = 1;
        return;
    }
    target_observe(env);
}

static void target_render(Target* env, uint8_t* rgb) {
    for (int i = 0; i < env->num_agents; i++) {
        uint32_t hue = (uint32_t)i * 2654435761u;
        uint8_t r = (uint8_t)(80 + (hue >> 24) % 170), g = (uint8_t)(80 + (hue >> 16) % 170), b = (uint8_t)(80 + (hue >> 8) % 170);
        fill_rect(rgb, 128, 128, (int)(env->gx[i] * 124), (int)(env->gy[i] * 124), 4, 4, r / 2, g / 2, b / 2);
        fill_rect(rgb, 128, 128, (int)(env->x[i] * 123), (int)(env->y[i] * 123), 5, 5, r, g, b);
    }
}

static void target_render_text(Target* env, char* text) {
    for (int i = 0; i < env->num_agents; i++) {
        int gx = (int)(env->gx[i] * 31.99f), gy = (int)(env->gy[i] * 15.99f);
        text[gy * 32 + gx] = (char)('a' + i % 26);
    }
    for (int i = 0; i < env->num_agents; i++) {
        int x = (int)(env->x[i] * 31.99f), y = (int)(env->y[i] * 15.99f);
        text[y * 32 + x] = (char)('A' + i % 26);
    }
}

static void target_close(Target* env) { (void)env; }

OCEAN_ENV(target, Target, TargetLog, "perf", "score", "episode_return", "episode_length", "n")
