/* pong: PufferLib 3.0's Ocean pong rules. The agent's paddle (right) against a scripted paddle (left)
 * that follows the ball at the paddles' speed, on a 500x640 court with 20x70 paddles and a 32 px ball.
 *   obs      float32[8]: own paddle y, opponent paddle y (over their range), ball x / 500, ball y / 640,
 *            (vx + 10) / 20, (vy + 13) / 26, opponent points / max_score, own points / max_score.
 *   action   Discrete(3): 0 stay, 1 paddle y + 8 px, 2 paddle y - 8 px, for `frameskip` frames.
 *   reward   +1 when the agent scores, -1 when the opponent does, return_reward (0.1, PufferLib 3.0's;
 *            4.0's pong pays 0) for returning the ball (the last of these in a step). Each point starts a new round with the ball leaving toward the
 *            agent; returning it adds +-3 to its vertical speed in the paddle's direction (at most 13).
 *            First to max_score (21) ends the episode.
 *   perf     own points / all points.
 */
#include "vecenv.h"

#define PONG_W 500.0f
#define PONG_H 640.0f
#define PONG_PADDLE_W 20.0f
#define PONG_PADDLE_H 70.0f
#define PONG_BALL 32.0f
#define PONG_SPEED 8.0f
#define PONG_VX 10.0f
#define PONG_VY 1.0f
#define PONG_VY_STEP 3.0f
#define PONG_VY_MAX 13.0f
#define PONG_MIN_Y (-PONG_PADDLE_H / 2)
#define PONG_MAX_Y (PONG_H - PONG_PADDLE_H / 2)

typedef struct PongLog {
    float perf, score, episode_return, episode_length, n;
} PongLog;

typedef struct Pong {
    PongLog log;
    Rng rng;
    float* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int frameskip, max_score, max_ticks;
    float return_reward;
    float own_y, opp_y, ball_x, ball_y, ball_vx, ball_vy;
    int own_points, opp_points, tick, steps;
    float episode_return;
} Pong;

static const ParamSpec pong_params[] = {
    {"frameskip", PARAM_INT, 8, 1, 16},
    {"max_score", PARAM_INT, 21, 1, 100},
    {"max_ticks", PARAM_INT, 400000, 100, 10000000}, /* frames before truncation (PufferLib has none) */
    {"return_reward", PARAM_FLOAT, 0.1, 0, 1},       /* paid for returning the ball */
    {NULL, 0, 0, 0, 0},
};

static void pong_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = 8, .obs_dtype = OBS_FLOAT32, .obs_low = -1, .obs_high = 1,
                    .action_dims = 1, .action_n = {3}, .frame_h = (int)PONG_H / 4, .frame_w = (int)PONG_W / 4,
                    .text_h = 16, .text_w = 40};
}

static void pong_init(Pong* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->frameskip = (int)PARAM(p, 0);
    env->max_score = (int)PARAM(p, 1);
    env->max_ticks = (int)PARAM(p, 2);
    env->return_reward = (float)PARAM(p, 3);
}

static void pong_observe(Pong* env) {
    float* o = env->observations;
    const float range = PONG_MAX_Y - PONG_MIN_Y;
    o[0] = (env->own_y - PONG_MIN_Y) / range;
    o[1] = (env->opp_y - PONG_MIN_Y) / range;
    o[2] = env->ball_x / PONG_W;
    o[3] = env->ball_y / PONG_H;
    o[4] = (env->ball_vx + PONG_VX) / (2 * PONG_VX);
    o[5] = (env->ball_vy + PONG_VY_MAX) / (2 * PONG_VY_MAX);
    o[6] = (float)env->opp_points / env->max_score;
    o[7] = (float)env->own_points / env->max_score;
}

/* Paddles centred, the ball a fifth of the way across, leaving toward the agent, level or slightly up. */
static void pong_round(Pong* env) {
    env->own_y = env->opp_y = PONG_H / 2 - PONG_PADDLE_H / 2;
    env->ball_x = PONG_W / 5;
    env->ball_y = PONG_H / 2 - PONG_BALL / 2;
    env->ball_vx = PONG_VX;
    env->ball_vy = (rng_u32(&env->rng) & 1) ? 0.0f : -PONG_VY;
}

static void pong_reset(Pong* env) {
    pong_round(env);
    env->own_points = env->opp_points = env->tick = env->steps = 0;
    env->episode_return = 0;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    pong_observe(env);
}

static inline float pong_clamp(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

/* One frame. Returns 1 when a point ends the round (the step ends there too); *reward is set by a
 * return (return_reward) or a point (+-1). */
static int pong_frame(Pong* env, float dir, float* reward) {
    env->own_y += PONG_SPEED * dir;
    env->opp_y += pong_clamp(env->ball_y - (env->opp_y + PONG_PADDLE_H / 2), -PONG_SPEED, PONG_SPEED);
    env->own_y = pong_clamp(env->own_y, PONG_MIN_Y, PONG_MAX_Y);
    env->opp_y = pong_clamp(env->opp_y, PONG_MIN_Y, PONG_MAX_Y);
    env->ball_x += env->ball_vx;
    env->ball_y += env->ball_vy;
    if (env->ball_y < 0 || env->ball_y + PONG_BALL > PONG_H) env->ball_vy = -env->ball_vy;
    if (env->ball_x < 0) {
        if (env->ball_y + PONG_BALL > env->opp_y && env->ball_y < env->opp_y + PONG_PADDLE_H) {
            env->ball_vx = -env->ball_vx;
        } else {
            env->own_points++;
            *reward = 1;
            return 1;
        }
    }
    if (env->ball_x + PONG_BALL > PONG_W) {
        if (env->ball_y + PONG_BALL > env->own_y && env->ball_y < env->own_y + PONG_PADDLE_H) {
            env->ball_vx = -env->ball_vx;
            *reward = env->return_reward;
            env->ball_vy = pong_clamp(env->ball_vy + PONG_VY_STEP * dir, -PONG_VY_MAX, PONG_VY_MAX);
            if (fabsf(env->ball_vy) < 0.01f) env->ball_vy = PONG_VY_STEP; /* never level */
        } else {
            env->opp_points++;
            *reward = -1;
            return 1;
        }
        env->ball_x = pong_clamp(env->ball_x, 0, PONG_W - PONG_BALL);
        env->ball_y = pong_clamp(env->ball_y, 0, PONG_H - PONG_BALL);
    }
    return 0;
}

static void pong_step(Pong* env) {
    int action = env->actions[0];
    float dir = action == 1 ? 1.0f : (action == 2 ? -1.0f : 0.0f);
    float reward = 0;
    int point = 0;
    for (int f = 0; f < env->frameskip && !point; f++) {
        point = pong_frame(env, dir, &reward);
        env->tick++;
    }
    env->steps++;
    env->episode_return += reward;
    int done = env->own_points >= env->max_score || env->opp_points >= env->max_score;
    int truncated = !done && env->tick >= env->max_ticks;
    if (done || truncated) {
        float all = (float)(env->own_points + env->opp_points);
        OCEAN_LOG_EPISODE(env->log, all > 0 ? env->own_points / all : 0.0f, (float)(env->own_points - env->opp_points),
                          env->episode_return, (float)env->steps);
    } else if (point) {
        pong_round(env);
    }
    OCEAN_END_STEP(env, done, truncated, reward, pong_reset, pong_observe);
}

static void pong_render(Pong* env, uint8_t* rgb) {
    int w = (int)PONG_W / 4, h = (int)PONG_H / 4; /* a quarter scale */
    fill_rect(rgb, w, h, 0, 0, w, h, 6, 24, 24);
    fill_rect(rgb, w, h, (int)((PONG_W - PONG_PADDLE_W) / 4), (int)(env->own_y / 4), (int)(PONG_PADDLE_W / 4),
              (int)(PONG_PADDLE_H / 4), 0, 187, 187);
    fill_rect(rgb, w, h, 0, (int)(env->opp_y / 4), (int)(PONG_PADDLE_W / 4), (int)(PONG_PADDLE_H / 4), 187, 0, 0);
    fill_rect(rgb, w, h, (int)(env->ball_x / 4), (int)(env->ball_y / 4), (int)(PONG_BALL / 4), (int)(PONG_BALL / 4),
              236, 236, 236);
}

static void pong_render_text(Pong* env, char* text) {
    const int tw = 40, th = 16;
    for (int y = (int)(env->own_y / PONG_H * th); y <= (int)((env->own_y + PONG_PADDLE_H) / PONG_H * th) && y < th; y++)
        if (y >= 0) text[y * tw + tw - 1] = '|';
    for (int y = (int)(env->opp_y / PONG_H * th); y <= (int)((env->opp_y + PONG_PADDLE_H) / PONG_H * th) && y < th; y++)
        if (y >= 0) text[y * tw] = '|';
    int bx = (int)(env->ball_x / PONG_W * tw), by = (int)(env->ball_y / PONG_H * th);
    if (bx >= 0 && bx < tw && by >= 0 && by < th) text[by * tw + bx] = 'o';
}

static void pong_close(Pong* env) { (void)env; }

OCEAN_ENV(pong, Pong, PongLog, "perf", "score", "episode_return", "episode_length", "n")
