/* breakout: a paddle, a ball and a 6x18 wall of bricks, Atari-style.
 *   obs      float32[118]: paddle x, paddle y, ball x, ball y (over the court size), ball vx, vy (over
 *            max speed), ball in play, score / 864, balls left / 5, paddle width / court width,
 *            then 108 bricks (1 intact, 0 gone), top row first. All in [-1, 1].
 *   action   Discrete(3): 0 stay, 1 left, 2 right. The ball launches by itself.
 *   reward   the brick's points: 7 for the top two rows, 4 for the middle two, 1 for the bottom two.
 *            A cleared wall is rebuilt once; clearing it twice (864 points) ends the episode, as does
 *            losing the fifth ball. Each step repeats the action for `frameskip` frames.
 *   perf     score / 864.
 */
#include "vecenv.h"

#define BO_ROWS 6
#define BO_COLS 18
#define BO_BRICKS (BO_ROWS * BO_COLS)
#define BO_W 576.0f
#define BO_H 330.0f
#define BO_BRICK_W (BO_W / BO_COLS)
#define BO_BRICK_H 12.0f
#define BO_BRICK_TOP 50.0f
#define BO_PADDLE_Y (BO_H - 20.0f)
#define BO_PADDLE_H 8.0f
#define BO_PADDLE_SPEED 8.0f
#define BO_BALL 6.0f
#define BO_MAX_SPEED 9.0f
#define BO_MAX_SCORE 864.0f
#define BO_BALLS 5

typedef struct BreakoutLog {
    float perf, score, episode_return, episode_length, n;
} BreakoutLog;

typedef struct Breakout {
    BreakoutLog log;
    Rng rng;
    float* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int frameskip, max_ticks;
    float paddle_w;
    /* state */
    float paddle_x, ball_x, ball_y, ball_vx, ball_vy, speed;
    int ball_live, serve_wait, balls_left, hits, top_hit, walls_cleared, bricks_left, tick;
    float score, episode_return;
    uint8_t bricks[BO_BRICKS];
} Breakout;

static const ParamSpec breakout_params[] = {
    {"frameskip", 4, 1, 16},
    {"paddle_width", 62, 16, 200},
    {"max_ticks", 27000, 100, 1000000}, /* physics frames before truncation */
    {NULL, 0, 0, 0},
};

static void breakout_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = 10 + BO_BRICKS, .obs_dtype = OBS_FLOAT32, .obs_low = -1,
                    .obs_high = 1, .action_dims = 1, .action_n = {3}, .frame_h = (int)BO_H / 2,
                    .frame_w = (int)BO_W / 2, .text_h = 24, .text_w = 36};
}

static void breakout_init(Breakout* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->frameskip = (int)PARAM(p, 0);
    env->paddle_w = (float)PARAM(p, 1);
    env->max_ticks = (int)PARAM(p, 2);
}

static const float breakout_row_points[BO_ROWS] = {7, 7, 4, 4, 1, 1};

static void breakout_observe(Breakout* env) {
    float* o = env->observations;
    o[0] = env->paddle_x / BO_W;
    o[1] = BO_PADDLE_Y / BO_H;
    o[2] = env->ball_x / BO_W;
    o[3] = env->ball_y / BO_H;
    o[4] = env->ball_vx / BO_MAX_SPEED;
    o[5] = env->ball_vy / BO_MAX_SPEED;
    o[6] = (float)env->ball_live;
    o[7] = env->score / BO_MAX_SCORE;
    o[8] = (float)env->balls_left / BO_BALLS;
    o[9] = env->paddle_w / BO_W;
    for (int i = 0; i < BO_BRICKS; i++) o[10 + i] = (float)env->bricks[i];
}

static void breakout_serve(Breakout* env) {
    env->ball_live = 0;
    env->serve_wait = 8; /* frames before the ball launches from the paddle */
    env->ball_x = env->paddle_x + env->paddle_w / 2 - BO_BALL / 2;
    env->ball_y = BO_PADDLE_Y - BO_BALL - 1;
    env->ball_vx = env->ball_vy = 0;
}

static void breakout_reset(Breakout* env) {
    env->paddle_x = (BO_W - env->paddle_w) / 2;
    env->balls_left = BO_BALLS;
    env->hits = env->top_hit = env->walls_cleared = env->tick = 0;
    env->speed = 5.0f;
    env->score = env->episode_return = 0;
    memset(env->bricks, 1, sizeof(env->bricks));
    env->bricks_left = BO_BRICKS;
    breakout_serve(env);
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    breakout_observe(env);
}

/* The brick under the ball's box, or -1. At most 2x2 cells can overlap a ball smaller than a brick. */
static int breakout_brick_hit(Breakout* env) {
    float x0 = env->ball_x, x1 = env->ball_x + BO_BALL, y0 = env->ball_y, y1 = env->ball_y + BO_BALL;
    if (y1 <= BO_BRICK_TOP || y0 >= BO_BRICK_TOP + BO_ROWS * BO_BRICK_H) return -1;
    int r0 = (int)((y0 - BO_BRICK_TOP) / BO_BRICK_H), r1 = (int)((y1 - 1e-3f - BO_BRICK_TOP) / BO_BRICK_H);
    int c0 = (int)(x0 / BO_BRICK_W), c1 = (int)((x1 - 1e-3f) / BO_BRICK_W);
    for (int r = r0 < 0 ? 0 : r0; r <= r1 && r < BO_ROWS; r++)
        for (int c = c0 < 0 ? 0 : c0; c <= c1 && c < BO_COLS; c++)
            if (env->bricks[r * BO_COLS + c]) return r * BO_COLS + c;
    return -1;
}

/* Remove a brick and return its points; speeds up after 4 and 12 hits and at the top rows. */
static float breakout_break(Breakout* env, int brick) {
    int row = brick / BO_COLS;
    env->bricks[brick] = 0;
    env->bricks_left--;
    env->hits++;
    if (env->hits == 4 || env->hits == 12) env->speed += 1.0f;
    if (row < 2 && !env->top_hit) {
        env->top_hit = 1;
        env->speed += 1.0f;
    }
    if (env->speed > BO_MAX_SPEED) env->speed = BO_MAX_SPEED;
    return breakout_row_points[row];
}

static void breakout_set_velocity(Breakout* env, float angle) {
    env->ball_vx = env->speed * sinf(angle);
    env->ball_vy = -env->speed * cosf(angle);
}

/* One physics frame; returns the points scored. Sets *done when the episode ends. */
static float breakout_frame(Breakout* env, int action, int* done) {
    float reward = 0;
    if (action == 1) env->paddle_x -= BO_PADDLE_SPEED;
    if (action == 2) env->paddle_x += BO_PADDLE_SPEED;
    if (env->paddle_x < 0) env->paddle_x = 0;
    if (env->paddle_x > BO_W - env->paddle_w) env->paddle_x = BO_W - env->paddle_w;
    if (!env->ball_live) {
        env->ball_x = env->paddle_x + env->paddle_w / 2 - BO_BALL / 2;
        if (--env->serve_wait <= 0) {
            env->ball_live = 1;
            float angle = (rng_float(&env->rng) - 0.5f) * 1.4f; /* within +-40 degrees */
            breakout_set_velocity(env, angle);
        }
        return 0;
    }
    /* x then y, each axis undone and reflected on contact: no tunnelling below 18 px/frame */
    env->ball_x += env->ball_vx;
    if (env->ball_x < 0) {
        env->ball_x = -env->ball_x;
        env->ball_vx = -env->ball_vx;
    } else if (env->ball_x > BO_W - BO_BALL) {
        env->ball_x = 2 * (BO_W - BO_BALL) - env->ball_x;
        env->ball_vx = -env->ball_vx;
    }
    int brick = breakout_brick_hit(env);
    if (brick >= 0) {
        reward += breakout_break(env, brick);
        env->ball_x -= env->ball_vx;
        env->ball_vx = -env->ball_vx;
    }
    env->ball_y += env->ball_vy;
    if (env->ball_y < 0) {
        env->ball_y = -env->ball_y;
        env->ball_vy = -env->ball_vy;
    }
    brick = breakout_brick_hit(env);
    if (brick >= 0) {
        reward += breakout_break(env, brick);
        env->ball_y -= env->ball_vy;
        env->ball_vy = -env->ball_vy;
    }
    /* paddle: the bounce angle follows where the ball meets it, up to 60 degrees */
    if (env->ball_vy > 0 && env->ball_y + BO_BALL >= BO_PADDLE_Y && env->ball_y < BO_PADDLE_Y + BO_PADDLE_H &&
        env->ball_x + BO_BALL > env->paddle_x && env->ball_x < env->paddle_x + env->paddle_w) {
        float rel = (env->ball_x + BO_BALL / 2 - env->paddle_x) / env->paddle_w * 2 - 1;
        if (rel < -1) rel = -1;
        if (rel > 1) rel = 1;
        breakout_set_velocity(env, rel * 1.05f);
        env->ball_y = BO_PADDLE_Y - BO_BALL;
    }
    if (env->ball_y > BO_H) {
        if (--env->balls_left <= 0) {
            *done = 1;
            return reward;
        }
        breakout_serve(env);
    }
    if (env->bricks_left == 0) {
        if (++env->walls_cleared >= 2) {
            *done = 1;
            return reward;
        }
        memset(env->bricks, 1, sizeof(env->bricks));
        env->bricks_left = BO_BRICKS;
        breakout_serve(env);
    }
    return reward;
}

static void breakout_step(Breakout* env) {
    int action = env->actions[0];
    int done = 0;
    float reward = 0;
    for (int f = 0; f < env->frameskip && !done; f++) {
        reward += breakout_frame(env, action, &done);
        env->tick++;
    }
    env->score += reward;
    env->episode_return += reward;
    int truncated = !done && env->tick >= env->max_ticks;
    if (done || truncated) {
        OCEAN_LOG_EPISODE(env->log, env->score / BO_MAX_SCORE, env->score, env->episode_return, (float)env->tick / env->frameskip);
    }
    OCEAN_END_STEP(env, done, truncated, reward, breakout_reset, breakout_observe);
}

static void breakout_render(Breakout* env, uint8_t* rgb) {
    static const uint8_t colors[BO_ROWS][3] = {{200, 72, 72}, {198, 108, 58}, {180, 122, 48},
                                               {162, 162, 42}, {72, 160, 72}, {66, 72, 200}};
    int w = (int)BO_W / 2, h = (int)BO_H / 2;
    for (int i = 0; i < BO_BRICKS; i++) {
        if (!env->bricks[i]) continue;
        int r = i / BO_COLS, c = i % BO_COLS;
        fill_rect(rgb, w, h, (int)(c * BO_BRICK_W / 2), (int)((BO_BRICK_TOP + r * BO_BRICK_H) / 2),
                  (int)(BO_BRICK_W / 2) - 1, (int)(BO_BRICK_H / 2) - 1, colors[r][0], colors[r][1], colors[r][2]);
    }
    fill_rect(rgb, w, h, (int)(env->paddle_x / 2), (int)(BO_PADDLE_Y / 2), (int)(env->paddle_w / 2),
              (int)(BO_PADDLE_H / 2), 200, 72, 72);
    fill_rect(rgb, w, h, (int)(env->ball_x / 2), (int)(env->ball_y / 2), 3, 3, 236, 236, 236);
}

static void breakout_render_text(Breakout* env, char* text) {
    const int tw = 36, th = 24;
    for (int i = 0; i < BO_BRICKS; i++) {
        int r = i / BO_COLS, c = i % BO_COLS;
        char ch = env->bricks[i] ? "##==--"[r] : ' ';
        text[(3 + r) * tw + 2 * c] = ch;
        text[(3 + r) * tw + 2 * c + 1] = ch;
    }
    int py = (int)(BO_PADDLE_Y / BO_H * th);
    for (int x = (int)(env->paddle_x / BO_W * tw); x < (int)((env->paddle_x + env->paddle_w) / BO_W * tw) && x < tw; x++)
        text[py * tw + x] = '_';
    int bx = (int)(env->ball_x / BO_W * tw), by = (int)(env->ball_y / BO_H * th);
    if (bx >= 0 && bx < tw && by >= 0 && by < th) text[by * tw + bx] = 'o';
}

static void breakout_close(Breakout* env) { (void)env; }

OCEAN_ENV(breakout, Breakout, BreakoutLog, "perf", "score", "episode_return", "episode_length", "n")
