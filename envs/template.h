/* template.h: the smallest complete Ocean env, to copy when writing a new one.
 * Guide: docs/writing-an-env.md. This file is not in registry.h; tests compile it on its own.
 *
 * The game: each step shows one of `num_colors` colours (one-hot); the agent scores +1 for naming
 * it with its action, 0 otherwise. An episode is `length` steps.
 *   obs      float32[num_colors], one-hot      action   Discrete(num_colors)
 *   perf     fraction of steps named right      (random policy: 1 / num_colors)
 */
#include "vecenv.h"

#define TEMPLATE_MAX_COLORS 16

/* 1. The Log: floats only, `n` last. The vector sums it over envs and divides by n. */
typedef struct TemplateLog {
    float perf, score, episode_return, episode_length, n;
} TemplateLog;

/* 2. The env struct. Required: `log`, `rng`, and the five buffer pointers (they point at this env's
 *    rows of the vector's arrays). Everything else is your state; no pointers to heap memory. */
typedef struct Template {
    TemplateLog log;
    Rng rng;
    float* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int num_colors, length; /* parameters */
    int color, tick;        /* state */
    float episode_return;
} Template;

/* 3. Parameters: name, type, default, min, max. This table is their one definition: the binding
 *    rejects values outside the range (and fractions for PARAM_INT), and the config's env section is
 *    built from it (`puffer-bench config <name>` shows it). Read them in this order with PARAM(p, i). */
static const ParamSpec template_params[] = {
    {"num_colors", PARAM_INT, 4, 2, TEMPLATE_MAX_COLORS},
    {"length", PARAM_INT, 16, 1, 100000},
    {NULL, 0, 0, 0, 0},
};

/* 4. Layout: sizes of everything, from the parameters. obs_low/obs_high are checked by the tests and
 * scale the policy's inputs, so keep them tight; the last obs_tail elements may have bounds of their
 * own (tail_low/tail_high) when they are on another scale. */
static void template_layout(const double* p, Layout* out) {
    int colors = (int)PARAM(p, 0);
    *out = (Layout){.agents_per_env = 1, .obs_size = colors, .obs_dtype = OBS_FLOAT32, .obs_low = 0, .obs_high = 1,
                    .action_dims = 1, .action_n = {colors}, .frame_h = 16, .frame_w = 16 * colors,
                    .text_h = 1, .text_w = colors};
}

/* 5. init: OCEAN_BIND takes the RNG and this env's rows of the buffers; then copy parameters.
 *    Called once; never allocate after this. */
static void template_init(Template* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->num_colors = (int)PARAM(p, 0);
    env->length = (int)PARAM(p, 1);
}

/* Write the whole observation every time: buffers are shared and hold the last step's values. */
static void template_observe(Template* env) {
    for (int i = 0; i < env->num_colors; i++) env->observations[i] = 0;
    env->observations[env->color] = 1;
}

/* 6. reset: a new episode. Zero the reward and done flags too. Randomness only from env->rng. */
static void template_reset(Template* env) {
    env->tick = 0;
    env->episode_return = 0;
    env->color = (int)rng_below(&env->rng, (uint32_t)env->num_colors);
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    template_observe(env);
}

/* 7. step: read actions, write rewards/terminals/truncations/observations. At an episode's end: log
 *    it (OCEAN_LOG_EPISODE), reset (auto-reset), then put back this step's reward and done flag,
 *    which the trainer needs. */
static void template_step(Template* env) {
    float reward = env->actions[0] == env->color ? 1.0f : 0.0f;
    env->tick++;
    env->episode_return += reward;
    if (env->tick >= env->length) {
        OCEAN_LOG_EPISODE(env->log, env->episode_return / (float)env->tick, env->episode_return, env->episode_return, (float)env->tick);
        template_reset(env);
        env->rewards[0] = reward;
        env->terminals[0] = 1;
        return;
    }
    env->color = (int)rng_below(&env->rng, (uint32_t)env->num_colors);
    env->rewards[0] = reward;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    template_observe(env);
}

/* 8. render into frame_h x frame_w x 3 bytes (zeroed before the call), and into text_h x text_w chars. */
static void template_render(Template* env, uint8_t* rgb) {
    fill_rect(rgb, 16 * env->num_colors, 16, 16 * env->color, 0, 16, 16, 240, 200, 40);
}

static void template_render_text(Template* env, char* text) {
    for (int i = 0; i < env->num_colors; i++) text[i] = i == env->color ? '#' : '.';
}

/* 9. close: free nothing (you allocated nothing). */
static void template_close(Template* env) { (void)env; }

/* 10. Register: prefix, struct, Log, then the Log's field names in order. */
OCEAN_ENV(template, Template, TemplateLog, "perf", "score", "episode_return", "episode_length", "n")
