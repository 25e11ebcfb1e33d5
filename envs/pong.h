/* pong: the agent's paddle (right) against a scripted paddle (left) that follows the ball with a
 * capped speed, so it can be beaten with angled shots.
 *   obs      float32[8]: own paddle y, opponent paddle y, ball x, ball y (over court size), ball vx,
 *            vy (over max speed), own points / max_score, opponent points / max_score. In [-1, 1].
 *   action   Discrete(3): 0 stay, 1 up, 2 down.
 *   reward   +1 when the agent scores, -1 when the opponent does. First to max_score (21) ends it.
 *   perf     (own - opponent + max_score) / (2 * max_score): 0 for a 0-21 loss, 1 for a 21-0 win.
 */
#include "vecenv.h"

#define PONG_W 160.0f
#define PONG_H 192.0f
#define PONG_PADDLE_H 24.0f
#define PONG_PADDLE_W 4.0f
#define PONG_BALL 3.0f
#define PONG_SPEED 4.0f
#define PONG_MAX_V 6.0f

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
    float opponent_speed;
    float own_y, opp_y, ball_x, ball_y, ball_vx, ball_vy;
    int own_points, opp_points, tick, serve_wait;
    float episode_return;
} Pong;

static const ParamSpec pong_params[] = {
    {"frameskip", 1, 1, 16},
    {"max_score", 21, 1, 100},
    {"opponent_speed", 2.5, 0.5, 8},
    {"max_ticks", 60000, 100, 1000000},
    {NULL, 0, 0, 0},
};

static void pong_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = 8, .obs_dtype = OBS_FLOAT32, .obs_low = -1, .obs_high = 1,
                    .action_dims = 1, .action_n = {3}, .frame_h = (int)PONG_H, .frame_w = (int)PONG_W,
                    .text_h = 16, .text_w = 40};
}

static void pong_init(Pong* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->frameskip = (int)PARAM(p, 0);
    env->max_score = (int)PARAM(p, 1);
    env->opponent_speed = (float)PARAM(p, 2);
    env->max_ticks = (int)PARAM(p, 3);
}

static void pong_observe(Pong* env) {
    float* o = env->observations;
    o[0] = env->own_y / PONG_H;
    o[1] = env->opp_y / PONG_H;
    o[2] = env->ball_x / PONG_W;
    o[3] = env->ball_y / PONG_H;
    o[4] = env->ball_vx / PONG_MAX_V;
    o[5] = env->ball_vy / PONG_MAX_V;
    o[6] = (float)env->own_points / env->max_score;
    o[7] = (float)env->opp_points / env->max_score;
}

/* Ball to the centre; it leaves toward a random side at a random angle after a short wait. */
static void pong_serve(Pong* env) {
    env->ball_x = PONG_W / 2;
    env->ball_y = PONG_H / 2;
    env->ball_vx = env->ball_vy = 0;
    env->serve_wait = 10;
}

static void pong_reset(Pong* env) {
    env->own_y = env->opp_y = (PONG_H - PONG_PADDLE_H) / 2;
    env->own_points = env->opp_points = env->tick = 0;
    env->episode_return = 0;
    pong_serve(env);
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    pong_observe(env);
}

static float pong_clamp(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* One frame; returns +1/-1 when a point is scored. */
static float pong_frame(Pong* env, int action) {
    if (action == 1) env->own_y -= PONG_SPEED;
    if (action == 2) env->own_y += PONG_SPEED;
    env->own_y = pong_clamp(env->own_y, 0, PONG_H - PONG_PADDLE_H);
    float target = env->ball_y - PONG_PADDLE_H / 2;
    env->opp_y += pong_clamp(target - env->opp_y, -env->opponent_speed, env->opponent_speed);
    env->opp_y = pong_clamp(env->opp_y, 0, PONG_H - PONG_PADDLE_H);
    if (env->serve_wait > 0) {
        if (--env->serve_wait == 0) {
            float angle = (rng_float(&env->rng) - 0.5f) * 1.2f;
            float dir = rng_u32(&env->rng) & 1 ? 1.0f : -1.0f;
            env->ball_vx = dir * 3.0f * cosf(angle);
            env->ball_vy = 3.0f * sinf(angle);
        }
        return 0;
    }
    env->ball_x += env->ball_vx;
    env->ball_y += env->ball_vy;
    if (env->ball_y < 0) {
        env->ball_y = -env->ball_y;
        env->ball_vy = -env->ball_vy;
    } else if (env->ball_y > PONG_H - PONG_BALL) {
        env->ball_y = 2 * (PONG_H - PONG_BALL) - env->ball_y;
        env->ball_vy = -env->ball_vy;
    }
    float own_x = PONG_W - PONG_PADDLE_W, opp_x = PONG_PADDLE_W;
    if (env->ball_vx > 0 && env->ball_x + PONG_BALL >= own_x && env->ball_x < PONG_W &&
        env->ball_y + PONG_BALL > env->own_y && env->ball_y < env->own_y + PONG_PADDLE_H) {
        float rel = (env->ball_y + PONG_BALL / 2 - env->own_y) / PONG_PADDLE_H * 2 - 1;
        float speed = pong_clamp(fabsf(env->ball_vx) * 1.05f, 3.0f, PONG_MAX_V * 0.8f);
        env->ball_vx = -speed;
        env->ball_vy = pong_clamp(rel * PONG_MAX_V * 0.6f, -PONG_MAX_V * 0.6f, PONG_MAX_V * 0.6f);
        env->ball_x = own_x - PONG_BALL;
    } else if (env->ball_vx < 0 && env->ball_x <= opp_x && env->ball_x + PONG_BALL > 0 &&
               env->ball_y + PONG_BALL > env->opp_y && env->ball_y < env->opp_y + PONG_PADDLE_H) {
        float rel = (env->ball_y + PONG_BALL / 2 - env->opp_y) / PONG_PADDLE_H * 2 - 1;
        env->ball_vx = pong_clamp(fabsf(env->ball_vx) * 1.05f, 3.0f, PONG_MAX_V * 0.8f);
        env->ball_vy = pong_clamp(rel * PONG_MAX_V * 0.6f, -PONG_MAX_V * 0.6f, PONG_MAX_V * 0.6f);
        env->ball_x = opp_x;
    }
    if (env->ball_x > PONG_W) {
        env->opp_points++;
        pong_serve(env);
        return -1;
    }
    if (env->ball_x + PONG_BALL < 0) {
        env->own_points++;
        pong_serve(env);
        return 1;
    }
    return 0;
}

static void pong_step(Pong* env) {
    int action = env->actions[0];
    float reward = 0;
    int done = 0;
    for (int f = 0; f < env->frameskip && !done; f++) {
        reward += pong_frame(env, action);
        env->tick++;
        done = env->own_points >= env->max_score || env->opp_points >= env->max_score;
    }
    env->episode_return += reward;
    int truncated = !done && env->tick >= env->max_ticks;
    if (done || truncated) {
        float diff = (float)(env->own_points - env->opp_points);
        OCEAN_LOG_EPISODE(env->log, (diff + env->max_score) / (2.0f * env->max_score), diff, env->episode_return, (float)env->tick / env->frameskip);
    }
    OCEAN_END_STEP(env, done, truncated, reward, pong_reset, pong_observe);
}

static void pong_render(Pong* env, uint8_t* rgb) {
    int w = (int)PONG_W, h = (int)PONG_H;
    fill_rect(rgb, w, h, 0, 0, w, h, 144, 72, 17);
    fill_rect(rgb, w, h, (int)(PONG_W - PONG_PADDLE_W), (int)env->own_y, (int)PONG_PADDLE_W, (int)PONG_PADDLE_H,
              92, 186, 92);
    fill_rect(rgb, w, h, 0, (int)env->opp_y, (int)PONG_PADDLE_W, (int)PONG_PADDLE_H, 213, 130, 74);
    fill_rect(rgb, w, h, (int)env->ball_x, (int)env->ball_y, (int)PONG_BALL, (int)PONG_BALL, 236, 236, 236);
}

static void pong_render_text(Pong* env, char* text) {
    const int tw = 40, th = 16;
    for (int y = (int)(env->own_y / PONG_H * th); y <= (int)((env->own_y + PONG_PADDLE_H) / PONG_H * th) && y < th; y++)
        text[y * tw + tw - 1] = '|';
    for (int y = (int)(env->opp_y / PONG_H * th); y <= (int)((env->opp_y + PONG_PADDLE_H) / PONG_H * th) && y < th; y++)
        text[y * tw] = '|';
    int bx = (int)(env->ball_x / PONG_W * tw), by = (int)(env->ball_y / PONG_H * th);
    if (bx >= 0 && bx < tw && by >= 0 && by < th) text[by * tw + bx] = 'o';
}

static void pong_close(Pong* env) { (void)env; }

OCEAN_ENV(pong, Pong, PongLog, "perf", "score", "episode_return", "episode_length", "n")
