/* breakout: PufferLib 3.0's Ocean breakout rules, in our own code. A 576x330 court, a 62x8 paddle, a
 * 32x32 ball and a wall of 6x18 bricks (32x12), swept collision against bricks, walls and paddle.
 *   obs      float32[118]: paddle x / 576, paddle y / 330, ball x / 576, ball y / 330, ball vx, vy
 *            (over 512), ball fired (0 or 0.2), score / 864, balls left / 5, paddle width / 62,
 *            then 108 bricks (1 = broken, 0 = standing), top row first. All in [-1, 1].
 *   action   Discrete(3): 0 stay, 1 left, 2 right. The ball fires by itself at the start of a round,
 *            down and to a random side at 1/3.25 pi from vertical.
 *   reward   the brick's points: 7 for the top two rows, 4 for the middle two, 1 for the bottom two.
 *   rules    6 balls (the episode ends when the sixth is lost) or 864 points (two walls: the wall is
 *            rebuilt on the first paddle hit once the score is 432). The ball starts at 256 px/s,
 *            gains 64 every 4th paddle hit up to 448, and jumps to 448 once a brick in the top three
 *            rows breaks (from the next paddle hit on). Touching the back wall halves the paddle for
 *            the rest of the round. The bounce angle is +-45 degrees across the paddle. Each step
 *            repeats the action for `frameskip` frames at 60 frames per second.
 *   perf     score / 864.
 */
#include "vecenv.h"

#define BO_ROWS 6
#define BO_COLS 18
#define BO_BRICKS (BO_ROWS * BO_COLS)
#define BO_OBS (10 + BO_BRICKS)
#define BO_W 576.0f
#define BO_H 330.0f
#define BO_BRICK_W 32.0f
#define BO_BRICK_H 12.0f
#define BO_TOP 50.0f /* y of the top row */
#define BO_PADDLE_W 62.0f
#define BO_PADDLE_H 8.0f
#define BO_PADDLE_Y (BO_H - BO_PADDLE_H - 10.0f)
#define BO_BALL 32.0f
#define BO_DT (1.0f / 60.0f)
#define BO_PI 3.14159265358979f
#define BO_PADDLE_SPEED (620.0f * BO_DT)
#define BO_SPEED0 256.0f
#define BO_SPEED_MAX 448.0f
#define BO_HALF_SCORE 432
#define BO_MAX_SCORE 864
#define BO_BALLS 5 /* balls in reserve after the first */

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
    /* state */
    float paddle_x, paddle_w, ball_x, ball_y, ball_vx, ball_vy, speed;
    int fired, balls, hits, score, tick;
    uint8_t broken[BO_BRICKS];
} Breakout;

static const ParamSpec breakout_params[] = {
    {"frameskip", PARAM_INT, 4, 1, 16},
    {"max_ticks", PARAM_INT, 108000, 100, 10000000}, /* frames before truncation (PufferLib has none) */
    {NULL, 0, 0, 0, 0},
};

static void breakout_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = BO_OBS, .obs_dtype = OBS_FLOAT32, .obs_low = -1,
                    .obs_high = 1, .action_dims = 1, .action_n = {3}, .frame_h = (int)BO_H / 2,
                    .frame_w = (int)BO_W / 2, .text_h = 24, .text_w = 36};
}

static void breakout_init(Breakout* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->frameskip = (int)PARAM(p, 0);
    env->max_ticks = (int)PARAM(p, 1);
}

static inline float breakout_points(int brick) { return (float)(7 - 3 * (brick / BO_COLS / 2)); }

/* The first ten observations; the bricks' are written when they change. */
static void breakout_observe(Breakout* env) {
    float* o = env->observations;
    o[0] = env->paddle_x / BO_W;
    o[1] = BO_PADDLE_Y / BO_H;
    o[2] = env->ball_x / BO_W;
    o[3] = env->ball_y / BO_H;
    o[4] = env->ball_vx / 512.0f;
    o[5] = env->ball_vy / 512.0f;
    o[6] = env->fired / 5.0f;
    o[7] = env->score / (float)BO_MAX_SCORE;
    o[8] = env->balls / 5.0f;
    o[9] = env->paddle_w / BO_PADDLE_W;
}

static void breakout_restore_wall(Breakout* env) {
    memset(env->broken, 0, sizeof(env->broken));
    for (int i = 0; i < BO_BRICKS; i++) env->observations[10 + i] = 0;
}

static void breakout_round(Breakout* env) {
    env->fired = 0;
    env->hits = 0;
    env->speed = BO_SPEED0;
    env->paddle_w = BO_PADDLE_W;
    env->paddle_x = BO_W / 2 - env->paddle_w / 2;
    env->ball_x = env->paddle_x + env->paddle_w / 2 - BO_BALL / 2;
    env->ball_y = BO_H / 2 - 30;
    env->ball_vx = env->ball_vy = 0;
}

static void breakout_reset(Breakout* env) {
    env->score = 0;
    env->balls = BO_BALLS;
    env->tick = 0;
    breakout_restore_wall(env);
    breakout_round(env);
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    breakout_observe(env);
}

/* Swept contact of the moving ball with one side of a box, over this frame (t in (0, 1]).
 * `lead` is the ball's leading coordinate on the moving axis, `span0` its trailing edge on the other
 * axis; the side is the segment [lo, lo + len] at `wall`. The earliest contact wins; among equal
 * times, the one with the larger overlap. */
typedef struct Contact {
    float t, overlap, x, y, vx, vy;
    int what; /* >= 0 a brick; else one of the BO_HIT_ codes */
} Contact;

enum { BO_HIT_NONE = -4, BO_HIT_SIDE = -3, BO_HIT_BACK = -2, BO_HIT_PADDLE = -1 };

/* Vertical side at x = wx spanning [wy, wy + wh], hit by the ball's edge at x (moving vx, vy). */
static inline int breakout_vside(float wx, float wy, float wh, float x, float y, float vx, float vy, Contact* c) {
    float t = (wx - x) / vx;
    float y0 = y + vy * t;
    float overlap = fminf(wy + wh, y0 + BO_BALL) - fmaxf(wy, y0);
    if (overlap > 0 && t > 0 && t <= 1 && (t < c->t || (t == c->t && overlap > c->overlap))) {
        *c = (Contact){t, overlap, wx, y0, -vx, vy, c->what};
        return 1;
    }
    return 0;
}

/* Horizontal side at y = wy spanning [wx, wx + ww], hit by the ball's edge at y. */
static inline int breakout_hside(float wx, float wy, float ww, float x, float y, float vx, float vy, Contact* c) {
    float t = (wy - y) / vy;
    float x0 = x + vx * t;
    float overlap = fminf(wx + ww, x0 + BO_BALL) - fmaxf(wx, x0);
    if (overlap > 0 && t > 0 && t <= 1 && (t < c->t || (t == c->t && overlap > c->overlap))) {
        *c = (Contact){t, overlap, x0, wy, vx, -vy, c->what};
        return 1;
    }
    return 0;
}

static void breakout_brick_contact(Breakout* env, int i, Contact* c) {
    float bx = (i % BO_COLS) * BO_BRICK_W, by = (i / BO_COLS) * BO_BRICK_H + BO_TOP;
    float x = env->ball_x, y = env->ball_y, vx = env->ball_vx, vy = env->ball_vy;
    int hit = 0;
    if (vx > 0 && breakout_vside(bx, by, BO_BRICK_H, x + BO_BALL, y, vx, vy, c)) {
        c->x -= BO_BALL;
        hit = 1;
    }
    if (vx < 0 && breakout_vside(bx + BO_BRICK_W, by, BO_BRICK_H, x, y, vx, vy, c)) hit = 1;
    if (vy > 0 && breakout_hside(bx, by, BO_BRICK_W, x, y + BO_BALL, vx, vy, c)) {
        c->y -= BO_BALL;
        hit = 1;
    }
    if (vy < 0 && breakout_hside(bx, by + BO_BRICK_H, BO_BRICK_W, x, y, vx, vy, c)) hit = 1;
    if (hit) c->what = i;
}

/* Only the bricks whose cells the ball's box sweeps over this frame. */
static void breakout_bricks_contact(Breakout* env, Contact* c) {
    float x = env->ball_x, y = env->ball_y, vx = env->ball_vx, vy = env->ball_vy;
    if (fmaxf(y + BO_BALL + vy, y + BO_BALL) < BO_TOP || fminf(y + vy, y) >= BO_TOP + BO_ROWS * BO_BRICK_H) return;
    int c0 = (int)floorf(fminf(x + vx, x) / BO_BRICK_W);
    int c1 = (int)floorf(fmaxf(x + BO_BALL + vx, x + BO_BALL) / BO_BRICK_W);
    int r0 = (int)floorf((fminf(y + vy, y) - BO_TOP) / BO_BRICK_H);
    int r1 = (int)floorf((fmaxf(y + BO_BALL + vy, y + BO_BALL) - BO_TOP) / BO_BRICK_H);
    if (c0 < 0) c0 = 0;
    if (r0 < 0) r0 = 0;
    if (c1 > BO_COLS - 1) c1 = BO_COLS - 1;
    if (r1 > BO_ROWS - 1) r1 = BO_ROWS - 1;
    for (int r = r0; r <= r1; r++)
        for (int col = c0; col <= c1; col++)
            if (!env->broken[r * BO_COLS + col]) breakout_brick_contact(env, r * BO_COLS + col, c);
}

static void breakout_walls_contact(Breakout* env, Contact* c) {
    float x = env->ball_x, y = env->ball_y, vx = env->ball_vx, vy = env->ball_vy;
    if (vx < 0 && breakout_vside(0, 0, BO_H, x, y, vx, vy, c)) c->what = BO_HIT_SIDE;
    if (vx > 0 && breakout_vside(BO_W, 0, BO_H, x + BO_BALL, y, vx, vy, c)) {
        c->x -= BO_BALL;
        c->what = BO_HIT_SIDE;
    }
    if (vy < 0 && breakout_hside(0, 0, BO_W, x, y, vx, vy, c)) c->what = BO_HIT_BACK;
}

/* The paddle, if the ball meets it before anything else this frame: the ball leaves at an angle set
 * by where it hit (+-45 degrees) and does not move this frame. */
static int breakout_paddle_contact(Breakout* env, Contact* c) {
    if (env->ball_y + BO_BALL + env->ball_vy < BO_PADDLE_Y) return 0;
    if (!breakout_hside(env->paddle_x, BO_PADDLE_Y, env->paddle_w, env->ball_x, env->ball_y + BO_BALL, env->ball_vx,
                        env->ball_vy, c))
        return 0;
    c->what = BO_HIT_PADDLE;
    float rel = (env->ball_x + BO_BALL / 2 - env->paddle_x) / env->paddle_w;
    float angle = BO_PI / 4 * (2 * rel - 1);
    env->ball_vx = sinf(angle) * env->speed * BO_DT;
    env->ball_vy = -cosf(angle) * env->speed * BO_DT;
    env->hits++;
    if (env->hits % 4 == 0 && env->speed < BO_SPEED_MAX) env->speed += 64;
    if (env->score == BO_HALF_SCORE) breakout_restore_wall(env);
    return 1;
}

/* Returns the points scored; moves the ball to its first contact this frame, or its full step. */
static float breakout_collide(Breakout* env) {
    const float nudge = BO_SPEED_MAX * 1.1f * BO_DT; /* float slop can push the ball past a wall */
    if (env->ball_x < 0) env->ball_x += nudge;
    if (env->ball_x > BO_W) env->ball_x -= nudge;
    if (env->ball_y < 0) env->ball_y += nudge;
    Contact c = {2.0f, -1.0f, 0, 0, 0, 0, BO_HIT_NONE};
    breakout_bricks_contact(env, &c);
    breakout_walls_contact(env, &c);
    if (breakout_paddle_contact(env, &c) || c.what == BO_HIT_NONE) {
        if (c.what == BO_HIT_NONE) {
            env->ball_x += env->ball_vx;
            env->ball_y += env->ball_vy;
        }
        return 0;
    }
    env->ball_x = c.x;
    env->ball_y = c.y;
    env->ball_vx = c.vx;
    env->ball_vy = c.vy;
    if (c.what == BO_HIT_BACK) env->paddle_w = BO_PADDLE_W / 2;
    if (c.what < 0) return 0;
    env->broken[c.what] = 1;
    env->observations[10 + c.what] = 1;
    if (c.what / BO_COLS < 3) env->speed = BO_SPEED_MAX;
    float points = breakout_points(c.what);
    env->score += (int)points;
    return points;
}

/* One frame; returns the points scored. Sets *done when the episode ends. */
static float breakout_frame(Breakout* env, int action, int* done) {
    float move = 0;
    if (!env->fired) { /* the serve frame ignores the action */
        env->fired = 1;
        const float dir = BO_PI / 3.25f;
        env->ball_vy = cosf(dir) * env->speed * BO_DT;
        env->ball_vx = sinf(dir) * env->speed * BO_DT;
        if (rng_u32(&env->rng) & 1) env->ball_vx = -env->ball_vx;
    } else if (action == 1) {
        move = -1;
    } else if (action == 2) {
        move = 1;
    }
    env->paddle_x += move * BO_PADDLE_SPEED;
    if (env->paddle_x <= 0)
        env->paddle_x = 0;
    else if (env->paddle_x > BO_W - env->paddle_w)
        env->paddle_x = BO_W - env->paddle_w;
    float reward = breakout_collide(env);
    if (env->ball_y >= BO_PADDLE_Y + BO_PADDLE_H) {
        if (--env->balls < 0) {
            *done = 1;
            return reward;
        }
        breakout_round(env);
    }
    if (env->score == BO_MAX_SCORE) *done = 1;
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
    int truncated = !done && env->tick >= env->max_ticks;
    if (done || truncated) {
        OCEAN_LOG_EPISODE(env->log, env->score / (float)BO_MAX_SCORE, (float)env->score, (float)env->score,
                          (float)((env->tick + env->frameskip - 1) / env->frameskip));
    }
    OCEAN_END_STEP(env, done, truncated, reward, breakout_reset, breakout_observe);
}

static void breakout_render(Breakout* env, uint8_t* rgb) {
    static const uint8_t colors[BO_ROWS][3] = {{230, 41, 55}, {255, 161, 0}, {253, 249, 0},
                                               {0, 228, 48}, {102, 191, 255}, {0, 121, 241}};
    int w = (int)BO_W / 2, h = (int)BO_H / 2;
    for (int i = 0; i < BO_BRICKS; i++) {
        if (env->broken[i]) continue;
        int r = i / BO_COLS, c = i % BO_COLS;
        fill_rect(rgb, w, h, (int)(c * BO_BRICK_W / 2), (int)((BO_TOP + r * BO_BRICK_H) / 2), (int)(BO_BRICK_W / 2) - 1,
                  (int)(BO_BRICK_H / 2) - 1, colors[r][0], colors[r][1], colors[r][2]);
    }
    fill_rect(rgb, w, h, (int)(env->paddle_x / 2), (int)(BO_PADDLE_Y / 2), (int)(env->paddle_w / 2),
              (int)(BO_PADDLE_H / 2), 0, 255, 255);
    fill_rect(rgb, w, h, (int)(env->ball_x / 2), (int)(env->ball_y / 2), (int)(BO_BALL / 2), (int)(BO_BALL / 2), 236,
              236, 236);
}

static void breakout_render_text(Breakout* env, char* text) {
    const int tw = 36, th = 24;
    for (int i = 0; i < BO_BRICKS; i++) {
        int r = i / BO_COLS, c = i % BO_COLS;
        char ch = env->broken[i] ? ' ' : "##==--"[r];
        int y = (int)((BO_TOP + r * BO_BRICK_H) / BO_H * th);
        text[y * tw + 2 * c] = ch;
        text[y * tw + 2 * c + 1] = ch;
    }
    int py = (int)(BO_PADDLE_Y / BO_H * th);
    for (int x = (int)(env->paddle_x / BO_W * tw); x < (int)((env->paddle_x + env->paddle_w) / BO_W * tw) && x < tw; x++)
        text[py * tw + x] = '_';
    int bx = (int)((env->ball_x + BO_BALL / 2) / BO_W * tw), by = (int)((env->ball_y + BO_BALL / 2) / BO_H * th);
    if (bx >= 0 && bx < tw && by >= 0 && by < th) text[by * tw + bx] = 'o';
}

static void breakout_close(Breakout* env) { (void)env; }

OCEAN_ENV(breakout, Breakout, BreakoutLog, "perf", "score", "episode_return", "episode_length", "n")
