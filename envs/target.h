/* target: PufferLib 3.0's Ocean target rules. Puffers (8 by default) swim a 1080x720 field with a
 * heading and a speed and eat stars (4, shared); multi-agent, one agent row per puffer.
 *   obs      float32[2*(agents+goals)+4] per agent: every star's dx / 1080, dy / 720, every agent's
 *            (itself included) dx, dy likewise, heading / 2pi, this step's reward, x / 1080, y / 720.
 *   action   MultiDiscrete([9, 5]): heading += (a0 - 4) / 12 (held in [0, 2pi]); speed += a1 - 2
 *            (held in [-20, 20]). Positions are held inside the field.
 *   reward   1 for coming within 32 px of a star, which reappears at random. A puffer that has gone
 *            512 steps without one is moved to a random spot (every 512 steps until it eats).
 *   episode  never ends, as PufferLib's (no terminal, no truncation: the field is never dealt anew).
 *            Every log_ticks steps each agent's stars in that window are logged as one record (score
 *            = stars eaten, episode_length = log_ticks), and its count starts again.
 *   perf     stars per step / 0.1, capped at 1.
 */
#include "vecenv.h"

#define TARGET_MAX_AGENTS 64
#define TARGET_MAX_GOALS 16
#define TARGET_W 1080
#define TARGET_H 720
#define TARGET_PI 3.14159265358979f
#define TARGET_REACH 32.0f

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
    int num_agents, num_goals, log_ticks, tick, obs_size;
    float x[TARGET_MAX_AGENTS], y[TARGET_MAX_AGENTS], heading[TARGET_MAX_AGENTS], speed[TARGET_MAX_AGENTS];
    int since_reward[TARGET_MAX_AGENTS];
    float goals[TARGET_MAX_AGENTS];
    float gx[TARGET_MAX_GOALS], gy[TARGET_MAX_GOALS];
} Target;

static const ParamSpec target_params[] = {
    {"num_agents", PARAM_INT, 8, 1, TARGET_MAX_AGENTS},
    {"num_goals", PARAM_INT, 4, 1, TARGET_MAX_GOALS},
    {"log_ticks", PARAM_INT, 512, 16, 100000}, /* steps per logged window (the env never ends) */
    {NULL, 0, 0, 0, 0},
};

static void target_layout(const double* p, Layout* out) {
    int agents = (int)PARAM(p, 0), goals = (int)PARAM(p, 1);
    *out = (Layout){.agents_per_env = agents, .obs_size = 2 * (agents + goals) + 4, .obs_dtype = OBS_FLOAT32,
                    .obs_low = -1, .obs_high = 1, .action_dims = 2, .action_n = {9, 5}, .frame_h = 144,
                    .frame_w = 216, .text_h = 18, .text_w = 54};
}

static void target_init(Target* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->num_agents = (int)PARAM(p, 0);
    env->num_goals = (int)PARAM(p, 1);
    env->log_ticks = (int)PARAM(p, 2);
    env->obs_size = 2 * (env->num_agents + env->num_goals) + 4;
}

static void target_observe(Target* env) {
    const float iw = 1.0f / TARGET_W, ih = 1.0f / TARGET_H;
    for (int i = 0; i < env->num_agents; i++) {
        float* o = env->observations + (size_t)i * env->obs_size;
        float x = env->x[i], y = env->y[i];
        for (int g = 0; g < env->num_goals; g++) {
            *o++ = (env->gx[g] - x) * iw;
            *o++ = (env->gy[g] - y) * ih;
        }
        for (int j = 0; j < env->num_agents; j++) {
            *o++ = (env->x[j] - x) * iw;
            *o++ = (env->y[j] - y) * ih;
        }
        *o++ = env->heading[i] / (2 * TARGET_PI);
        *o++ = env->rewards[i];
        *o++ = x * iw;
        *o++ = y * ih;
    }
}

static inline void target_place(Target* env, float* x, float* y) {
    *x = (float)rng_below(&env->rng, TARGET_W);
    *y = (float)rng_below(&env->rng, TARGET_H);
}

static void target_reset(Target* env) {
    env->tick = 0;
    for (int i = 0; i < env->num_agents; i++) {
        target_place(env, &env->x[i], &env->y[i]);
        env->heading[i] = env->speed[i] = 0;
        env->since_reward[i] = 0;
        env->goals[i] = 0;
        env->rewards[i] = 0;
        env->terminals[i] = 0;
        env->truncations[i] = 0;
    }
    for (int g = 0; g < env->num_goals; g++) target_place(env, &env->gx[g], &env->gy[g]);
    target_observe(env);
}

static inline float target_clip(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

static void target_step(Target* env) {
    env->tick++;
    for (int i = 0; i < env->num_agents; i++) {
        const int32_t* a = env->actions + 2 * i;
        env->rewards[i] = 0;
        env->since_reward[i]++;
        float heading = target_clip(env->heading[i] + (float)(a[0] - 4) / 12.0f, 0, 2 * TARGET_PI);
        float speed = target_clip(env->speed[i] + (float)(a[1] - 2), -20.0f, 20.0f);
        env->heading[i] = heading;
        env->speed[i] = speed;
        env->x[i] = target_clip(env->x[i] + speed * cosf(heading), 0, TARGET_W);
        env->y[i] = target_clip(env->y[i] + speed * sinf(heading), 0, TARGET_H);
        if (env->since_reward[i] % 512 == 0) target_place(env, &env->x[i], &env->y[i]);
    }
    /* agents in order, each against every star; an eaten star moves before the next agent looks */
    for (int i = 0; i < env->num_agents; i++) {
        for (int g = 0; g < env->num_goals; g++) {
            float dx = env->gx[g] - env->x[i], dy = env->gy[g] - env->y[i];
            if (dx * dx + dy * dy > TARGET_REACH * TARGET_REACH) continue;
            target_place(env, &env->gx[g], &env->gy[g]);
            env->rewards[i] = 1;
            env->goals[i] += 1;
            env->since_reward[i] = 0;
        }
    }
    for (int i = 0; i < env->num_agents; i++) {
        env->terminals[i] = 0;
        env->truncations[i] = 0;
    }
    if (env->tick >= env->log_ticks) { /* a logged window, not an episode's end */
        for (int i = 0; i < env->num_agents; i++) {
            float perf = env->goals[i] / (0.1f * env->tick);
            OCEAN_LOG_EPISODE(env->log, perf > 1 ? 1 : perf, env->goals[i], env->goals[i], (float)env->tick);
            env->goals[i] = 0;
        }
        env->tick = 0;
    }
    target_observe(env);
}

static void target_render(Target* env, uint8_t* rgb) {
    const int w = 216, h = 144; /* a fifth of the field */
    for (int g = 0; g < env->num_goals; g++)
        fill_rect(rgb, w, h, (int)(env->gx[g] / 5) - 2, (int)(env->gy[g] / 5) - 2, 5, 5, 253, 249, 0);
    for (int i = 0; i < env->num_agents; i++) {
        uint32_t hue = (uint32_t)i * 2654435761u;
        uint8_t r = (uint8_t)(80 + (hue >> 24) % 170), g = (uint8_t)(80 + (hue >> 16) % 170), b = (uint8_t)(80 + (hue >> 8) % 170);
        fill_rect(rgb, w, h, (int)(env->x[i] / 5) - 3, (int)(env->y[i] / 5) - 3, 7, 7, r, g, b);
    }
}

static void target_render_text(Target* env, char* text) {
    const int tw = 54, th = 18;
    for (int g = 0; g < env->num_goals; g++) {
        int x = (int)(env->gx[g] / TARGET_W * (tw - 0.01f)), y = (int)(env->gy[g] / TARGET_H * (th - 0.01f));
        text[y * tw + x] = '*';
    }
    for (int i = 0; i < env->num_agents; i++) {
        int x = (int)(env->x[i] / TARGET_W * (tw - 0.01f)), y = (int)(env->y[i] / TARGET_H * (th - 0.01f));
        text[y * tw + x] = (char)('A' + i % 26);
    }
}

static void target_close(Target* env) { (void)env; }

OCEAN_ENV(target, Target, TargetLog, "perf", "score", "episode_return", "episode_length", "n")
