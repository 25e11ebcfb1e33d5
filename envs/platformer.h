/* platformer: a side-scrolling pixel platformer of our own design, seen as small grayscale frames.
 * Each episode builds a new level from the env's RNG: runs of ground at heights 1-5 tiles, gaps of
 * up to `max_gap` tiles (some with a stepping-stone platform above them), steps up and down, and
 * enemies that patrol flat runs; a goal pole stands near the right end. No level repeats, so a
 * policy has to read the frame rather than memorise a route.
 *   world    12 tiles high, `length` tiles long; a tile is 4x4 px. Player 3x4 px, enemies 4x3 px.
 *            Run speed 1.5 px/step, gravity 0.5 px/step^2, jump speed 4 px/step (a jump clears 4
 *            tiles up and about 6 across), falls capped at 3.5 px/step. Enemies walk 0.5 px/step
 *            and turn at their run's ends.
 *   obs      uint8[2, 48, 48]: the previous and the current frame (channel first), a 48x48 px window
 *            that follows the player (a quarter of the way in from the left). Sky 0, ground 96, goal
 *            pole 160, enemies 200, player 255. The env stacks the two frames itself (the trainer
 *            has no frame stack for Ocean envs), so motion (a jump's rise or fall, an enemy's way)
 *            is in one observation; it costs one 2,304-byte copy per step.
 *   action   Discrete(6): 0 stay, 1 left, 2 right, 3 jump, 4 jump right, 5 jump left. A jump starts
 *            from the ground, or up to 3 steps after running off an edge (a platformer's "coyote
 *            time": the edge need not be hit to the pixel).
 *   reward   progress: each new furthest x pays its gain over the start-to-goal distance (1 in all
 *            over a level), +1 for reaching the goal. Dying (falling into a gap, or touching an enemy
 *            other than by landing on it from above, which removes the enemy) costs no reward but
 *            the rest of the level's: a penalty taught the first policies to stand still until
 *            max_steps (measured: timeouts rose from 0 to 0.9 of episodes in 250 K steps).
 *   ends     terminal on reaching the goal or dying; truncated after `max_steps` steps.
 *   perf     1 if the episode reached the goal, else 0: the fraction of episodes that finish a level.
 *            score: the furthest fraction of the level reached (1 at the goal). fell, hit, timeout:
 *            the fractions of episodes that ended in a gap, on an enemy, at max_steps.
 */
#include "vecenv.h"

#define PF_TILE 4
#define PF_ROWS 12
#define PF_VIEW 48 /* px a side of the observed window: 12 tiles */
#define PF_FRAMES 2
#define PF_FRAME_PX (PF_VIEW * PF_VIEW)
#define PF_MAX_COLS 256
#define PF_MAX_ENEMIES 48
#define PF_PW 3.0f
#define PF_PH 4.0f
#define PF_EW 4.0f
#define PF_EH 3.0f
#define PF_RUN 1.5f
#define PF_GRAVITY 0.5f
#define PF_JUMP 4.0f
#define PF_MAX_FALL 3.5f
#define PF_STOMP_BOUNCE 3.0f
#define PF_COYOTE 3 /* steps after running off an edge in which a jump still starts */
#define PF_ENEMY_SPEED 0.5f
#define PF_START_COLS 6 /* flat ground at the start, never an enemy */
#define PF_END_COLS 8   /* flat ground at the end, the goal pole on it */
#define PF_SCALE 4 /* render(): each observed pixel as 4x4 RGB pixels */

enum { PF_SKY = 0, PF_GROUND = 96, PF_GOAL = 160, PF_ENEMY = 200, PF_PLAYER = 255 };

typedef struct PlatformerLog {
    float perf, score, episode_return, episode_length, fell, hit, timeout, n;
} PlatformerLog;

typedef struct PfEnemy {
    float x, y, vx, xmin, xmax;
    int alive;
} PfEnemy;

typedef struct Platformer {
    PlatformerLog log;
    Rng rng;
    uint8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int cols, max_steps, max_gap; /* parameters */
    float enemy_rate;
    /* the level */
    uint8_t solid[PF_ROWS][PF_MAX_COLS];
    PfEnemy enemies[PF_MAX_ENEMIES];
    int num_enemies, goal_col;
    /* the player */
    float px, py, vy, start_x, best_x;
    int grounded, air, jumped, tick; /* air: steps since last on the ground */
    float episode_return;
} Platformer;

static const ParamSpec platformer_params[] = {
    {"length", PARAM_INT, 40, 24, PF_MAX_COLS},   /* tiles from start to end */
    {"max_steps", PARAM_INT, 300, 50, 1000000},   /* steps before truncation */
    {"max_gap", PARAM_INT, 3, 0, 4},              /* widest gap, tiles (0: no gaps) */
    {"enemy_rate", PARAM_FLOAT, 0.6, 0, 1},       /* chance a flat run of 4+ tiles has an enemy */
    {NULL, 0, 0, 0, 0},
};

static void platformer_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = PF_FRAMES * PF_FRAME_PX, .obs_dtype = OBS_UINT8,
                    .obs_low = 0, .obs_high = 255, .action_dims = 1, .action_n = {6},
                    .frame_h = PF_VIEW * PF_SCALE, .frame_w = PF_VIEW * PF_SCALE, .text_h = PF_ROWS, .text_w = 32,
                    .obs_channels = PF_FRAMES, .obs_height = PF_VIEW, .obs_width = PF_VIEW};
}

static void platformer_init(Platformer* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->cols = (int)PARAM(p, 0);
    env->max_steps = (int)PARAM(p, 1);
    env->max_gap = (int)PARAM(p, 2);
    env->enemy_rate = (float)PARAM(p, 3);
}

/* ------------------------------------------------------------------ the level */

/* Solid at tile (tx, ty)? Left of the level is a wall, above it open sky, below it the pit. */
static inline int pf_solid(const Platformer* env, int tx, int ty) {
    if (tx < 0 || tx >= env->cols) return 1;
    if (ty < 0 || ty >= PF_ROWS) return 0;
    return env->solid[ty][tx];
}

/* Does the box [x, x+w) x [y, y+h) overlap a solid tile? */
static int pf_blocked(const Platformer* env, float x, float y, float w, float h) {
    int tx0 = (int)floorf(x / PF_TILE), tx1 = (int)floorf((x + w - 1e-3f) / PF_TILE);
    int ty0 = (int)floorf(y / PF_TILE), ty1 = (int)floorf((y + h - 1e-3f) / PF_TILE);
    for (int ty = ty0; ty <= ty1; ty++)
        for (int tx = tx0; tx <= tx1; tx++)
            if (pf_solid(env, tx, ty)) return 1;
    return 0;
}

/* Ground `height` tiles high under columns [c, c + len), clipped to the level. Returns c + len. */
static int pf_run(Platformer* env, int c, int len, int height) {
    for (int x = c; x < c + len && x < env->cols; x++)
        for (int y = PF_ROWS - height; y < PF_ROWS; y++) env->solid[y][x] = 1;
    return c + len;
}

static inline int pf_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void pf_add_enemy(Platformer* env, int c, int len, int height) {
    if (env->num_enemies >= PF_MAX_ENEMIES || c + len > env->cols) return;
    PfEnemy* e = &env->enemies[env->num_enemies++];
    e->xmin = (float)(c * PF_TILE);
    e->xmax = (float)((c + len) * PF_TILE) - PF_EW;
    e->x = e->xmin + rng_float(&env->rng) * (e->xmax - e->xmin);
    e->y = (float)((PF_ROWS - height) * PF_TILE) - PF_EH;
    e->vx = rng_below(&env->rng, 2) ? PF_ENEMY_SPEED : -PF_ENEMY_SPEED;
    e->alive = 1;
}

/* A new level from env->rng: segments of gap, step or flat run (maybe with an enemy) until the end. */
static void pf_generate(Platformer* env) {
    Rng* r = &env->rng;
    memset(env->solid, 0, sizeof(env->solid));
    env->num_enemies = 0;
    int h = 2;
    int c = pf_run(env, 0, PF_START_COLS, h);
    const int end = env->cols - PF_END_COLS;
    while (c < end) {
        uint32_t kind = rng_below(r, 100);
        if (kind < 35 && env->max_gap > 0) { /* a gap, then a short landing */
            int gap = 1 + (int)rng_below(r, (uint32_t)env->max_gap);
            if (gap >= 3 && rng_below(r, 2)) { /* a stepping stone over a wide gap */
                int row = PF_ROWS - h - 2;
                for (int x = c + 1; x < c + gap - 1 && x < env->cols; x++) env->solid[row][x] = 1;
            }
            c += gap;
            h = pf_clamp(h + (int)rng_below(r, 3) - 1, 1, 5);
            c = pf_run(env, c, 2 + (int)rng_below(r, 2), h);
        } else if (kind < 60) { /* a step up or down */
            int d = 1 + (int)rng_below(r, 2);
            h = pf_clamp(h + (rng_below(r, 2) ? d : -d), 1, 5);
            c = pf_run(env, c, 2 + (int)rng_below(r, 3), h);
        } else { /* a flat run, perhaps patrolled */
            int len = 4 + (int)rng_below(r, 4);
            if (rng_float(r) < env->enemy_rate) pf_add_enemy(env, c, len, h);
            c = pf_run(env, c, len, h);
        }
    }
    pf_run(env, c, env->cols - c, h);
    env->goal_col = env->cols - 3;
}

/* ------------------------------------------------------------------ frames */

static inline int pf_camera(const Platformer* env) {
    int cam = (int)env->px - PF_VIEW / 4;
    int last = env->cols * PF_TILE - PF_VIEW;
    return cam < 0 ? 0 : cam > last ? last : cam;
}

/* Draw the box [x, x+w) x [y, y+h) (world px) into a PF_VIEW-wide frame seen from cam. */
static inline void pf_box(uint8_t* f, int cam, float x, float y, float w, float h, uint8_t value) {
    int x0 = (int)floorf(x) - cam, y0 = (int)floorf(y);
    int x1 = x0 + (int)w, y1 = y0 + (int)h;
    for (int yy = y0 < 0 ? 0 : y0; yy < y1 && yy < PF_VIEW; yy++)
        for (int xx = x0 < 0 ? 0 : x0; xx < x1 && xx < PF_VIEW; xx++) f[yy * PF_VIEW + xx] = value;
}

/* The current frame: PF_VIEW x PF_VIEW gray pixels. */
static void pf_draw(const Platformer* env, uint8_t* f) {
    int cam = pf_camera(env);
    for (int y = 0; y < PF_VIEW; y++) {
        const uint8_t* row = env->solid[y / PF_TILE];
        uint8_t* out = f + y * PF_VIEW;
        for (int x = 0; x < PF_VIEW; x++) out[x] = row[(cam + x) / PF_TILE] ? PF_GROUND : PF_SKY;
    }
    int ground = 0; /* the pole stands on the goal column's ground */
    while (ground < PF_ROWS && !env->solid[ground][env->goal_col]) ground++;
    pf_box(f, cam, (float)(env->goal_col * PF_TILE + 1), 0.0f, 2.0f, (float)(ground * PF_TILE), PF_GOAL);
    for (int i = 0; i < env->num_enemies; i++) {
        const PfEnemy* e = &env->enemies[i];
        if (e->alive) pf_box(f, cam, e->x, e->y, PF_EW, PF_EH, PF_ENEMY);
    }
    pf_box(f, cam, env->px, env->py, PF_PW, PF_PH, PF_PLAYER);
}

/* The previous frame moves to plane 0 and the current one is drawn into plane 1. */
static void platformer_observe(Platformer* env) {
    memcpy(env->observations, env->observations + PF_FRAME_PX, PF_FRAME_PX);
    pf_draw(env, env->observations + PF_FRAME_PX);
}

/* ------------------------------------------------------------------ episodes */

static void platformer_reset(Platformer* env) {
    pf_generate(env);
    env->px = env->start_x = env->best_x = (float)PF_TILE;
    env->py = (float)((PF_ROWS - 2) * PF_TILE) - PF_PH; /* on the start's ground, 2 tiles high */
    env->vy = 0;
    env->grounded = 1;
    env->air = 0;
    env->jumped = 0;
    env->tick = 0;
    env->episode_return = 0;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    pf_draw(env, env->observations + PF_FRAME_PX);
    memcpy(env->observations, env->observations + PF_FRAME_PX, PF_FRAME_PX);
}

static void platformer_step(Platformer* env) {
    static const int8_t dirs[6] = {0, -1, 1, 0, 1, -1};
    int a = env->actions[0];
    int dir = dirs[a], jump = a >= 3;
    float reward = 0;
    env->tick++;

    /* horizontal: move, then back off the tile it ran into */
    if (dir) {
        float nx = env->px + dir * PF_RUN;
        if (pf_blocked(env, nx, env->py, PF_PW, PF_PH))
            nx = dir > 0 ? floorf((nx + PF_PW) / PF_TILE) * PF_TILE - PF_PW : (floorf(nx / PF_TILE) + 1) * PF_TILE;
        env->px = nx;
    }
    /* vertical: jump from the ground, fall, land or bump a ceiling */
    if (jump && !env->jumped && (env->grounded || env->air <= PF_COYOTE)) {
        env->vy = -PF_JUMP;
        env->jumped = 1;
    }
    env->vy += PF_GRAVITY;
    if (env->vy > PF_MAX_FALL) env->vy = PF_MAX_FALL;
    const float vy = env->vy, bottom_before = env->py + PF_PH;
    float ny = env->py + vy;
    env->grounded = 0;
    if (pf_blocked(env, env->px, ny, PF_PW, PF_PH)) {
        if (vy > 0) {
            ny = floorf((ny + PF_PH) / PF_TILE) * PF_TILE - PF_PH;
            env->grounded = 1;
            env->jumped = 0;
        } else {
            ny = (floorf(ny / PF_TILE) + 1) * PF_TILE;
        }
        env->vy = 0;
    }
    env->py = ny;
    env->air = env->grounded ? 0 : env->air + 1;

    /* enemies walk, then touch the player: from above a stomp, otherwise a death */
    int hit = 0;
    for (int i = 0; i < env->num_enemies; i++) {
        PfEnemy* e = &env->enemies[i];
        if (!e->alive) continue;
        e->x += e->vx;
        if (e->x <= e->xmin || e->x >= e->xmax) {
            e->x = e->x < e->xmin ? e->xmin : e->x > e->xmax ? e->xmax : e->x;
            e->vx = -e->vx;
        }
        int overlap = env->px < e->x + PF_EW && e->x < env->px + PF_PW && env->py < e->y + PF_EH &&
                      e->y < env->py + PF_PH;
        if (!overlap) continue;
        if (vy > 0 && bottom_before <= e->y + 1.0f) {
            e->alive = 0;
            env->vy = -PF_STOMP_BOUNCE;
            env->grounded = 0;
            env->jumped = 1;
        } else {
            hit = 1;
        }
    }
    int fell = env->py >= (float)(PF_ROWS * PF_TILE);

    /* progress pays once per new furthest x; the goal and death end the episode */
    const float goal_x = (float)(env->goal_col * PF_TILE);
    if (env->px > env->best_x) {
        reward += (env->px - env->best_x) / (goal_x - PF_PW - env->start_x);
        env->best_x = env->px;
    }
    int won = env->px + PF_PW >= goal_x && !hit && !fell;
    if (won) reward += 1.0f;
    int done = won || hit || fell;
    int truncated = !done && env->tick >= env->max_steps;
    env->episode_return += reward;
    if (done || truncated) {
        float reached = (env->best_x - env->start_x) / (goal_x - PF_PW - env->start_x);
        reached = won ? 1.0f : reached > 1.0f ? 1.0f : reached;
        OCEAN_LOG_EPISODE(env->log, (float)won, reached, env->episode_return, (float)env->tick);
        env->log.fell += (float)(fell && !hit);
        env->log.hit += (float)hit;
        env->log.timeout += (float)truncated;
    }
    OCEAN_END_STEP(env, done, truncated, reward, platformer_reset, platformer_observe);
}

/* ------------------------------------------------------------------ render */

static void platformer_render(Platformer* env, uint8_t* rgb) {
    uint8_t f[PF_FRAME_PX];
    pf_draw(env, f);
    const int side = PF_VIEW * PF_SCALE;
    for (int y = 0; y < PF_VIEW; y++) {
        for (int x = 0; x < PF_VIEW; x++) {
            uint8_t v = f[y * PF_VIEW + x], c0 = 92, c1 = 148, c2 = 252; /* sky */
            if (v == PF_GROUND) c0 = 160, c1 = 96, c2 = 40;
            else if (v == PF_GOAL) c0 = 40, c1 = 200, c2 = 60;
            else if (v == PF_ENEMY) c0 = 200, c1 = 40, c2 = 40;
            else if (v == PF_PLAYER) c0 = 250, c1 = 240, c2 = 120;
            fill_rect(rgb, side, side, x * PF_SCALE, y * PF_SCALE, PF_SCALE, PF_SCALE, c0, c1, c2);
        }
    }
}

/* 12 rows of 32 tiles around the player: # ground, G goal, E enemy, P player, . sky. */
static void platformer_render_text(Platformer* env, char* text) {
    const int w = 32;
    int c0 = (int)(env->px / PF_TILE) - 8;
    c0 = c0 > env->cols - w ? env->cols - w : c0;
    c0 = c0 < 0 ? 0 : c0;
    for (int y = 0; y < PF_ROWS; y++)
        for (int x = 0; x < w; x++) {
            int c = c0 + x;
            text[y * w + x] = c < env->cols && env->solid[y][c] ? '#' : c == env->goal_col ? 'G' : '.';
        }
    for (int i = 0; i < env->num_enemies; i++) {
        const PfEnemy* e = &env->enemies[i];
        int x = (int)((e->x + PF_EW / 2) / PF_TILE) - c0, y = (int)((e->y + PF_EH / 2) / PF_TILE);
        if (e->alive && x >= 0 && x < w && y >= 0 && y < PF_ROWS) text[y * w + x] = 'E';
    }
    int x = (int)((env->px + PF_PW / 2) / PF_TILE) - c0, y = (int)((env->py + PF_PH / 2) / PF_TILE);
    if (x >= 0 && x < w && y >= 0 && y < PF_ROWS) text[y * w + x] = 'P';
}

static void platformer_close(Platformer* env) { (void)env; }

OCEAN_ENV(platformer, Platformer, PlatformerLog, "perf", "score", "episode_return", "episode_length", "fell", "hit",
          "timeout", "n")
