/* snake: PufferLib 3.0's Ocean snake rules, on a smaller default grid. Several snakes share one grid
 * (multi-agent: one agent row per snake) inside a wall band `vision` cells wide.
 *   obs      int8[(2*vision+1)^2]: the window centred on the snake's head, in PufferLib's tile codes:
 *            0 empty, 1 food, 2 corpse, 3 wall, 4-7 a snake (snake 0 is 7, snake i is 4 + i % 4).
 *   action   Discrete(4): 0 up, 1 down, 2 left, 3 right. Turning back onto the neck goes straight on.
 *   reward   reward_food (0.1) for food, which reappears elsewhere at once; reward_corpse (0.1) for
 *            a corpse; each grows the snake (up to max_snake_length - 1). reward_death (-1) for
 *            moving into a wall or any snake (its own tail included): the snake is logged, its body
 *            turns into corpses on every other cell from the head, and it respawns at once, length 1.
 *            A life longer than max_ticks is truncated (PufferLib has no limit).
 *   perf     length / steps lived, as PufferLib logs it; score is the length at death.
 * Snakes move in index order within a step, so results are deterministic for a seed.
 */
#include "vecenv.h"

#define SNAKE_MAX_GRID 64
#define SNAKE_MAX_SNAKES 64
#define SNAKE_MAX_LEN 256
#define SNAKE_MAX_VISION 5 /* with width, height >= 12 the band leaves room to play */
#define SNAKE_EMPTY 0
#define SNAKE_FOOD 1
#define SNAKE_CORPSE 2
#define SNAKE_WALL 3

typedef struct SnakeLog {
    float perf, score, episode_return, episode_length, n;
} SnakeLog;

typedef struct Snake {
    SnakeLog log;
    Rng rng;
    int8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int width, height, num_snakes, num_food, vision, window, max_len, max_ticks, corpses;
    float reward_food, reward_corpse, reward_death;
    uint8_t grid[SNAKE_MAX_GRID * SNAKE_MAX_GRID];
    uint8_t body_r[SNAKE_MAX_SNAKES][SNAKE_MAX_LEN], body_c[SNAKE_MAX_SNAKES][SNAKE_MAX_LEN];
    int head[SNAKE_MAX_SNAKES], length[SNAKE_MAX_SNAKES], ticks[SNAKE_MAX_SNAKES];
    float returns[SNAKE_MAX_SNAKES];
} Snake;

static const ParamSpec snake_params[] = {
    {"width", PARAM_INT, 40, 12, SNAKE_MAX_GRID},
    {"height", PARAM_INT, 30, 12, SNAKE_MAX_GRID},
    {"num_snakes", PARAM_INT, 4, 1, SNAKE_MAX_SNAKES},
    {"num_food", PARAM_INT, 12, 1, 1024},
    {"vision", PARAM_INT, 5, 1, SNAKE_MAX_VISION},
    {"max_snake_length", PARAM_INT, 128, 2, SNAKE_MAX_LEN},
    {"leave_corpse_on_death", PARAM_INT, 1, 0, 1},
    {"reward_food", PARAM_FLOAT, 0.1, -10, 10},
    {"reward_corpse", PARAM_FLOAT, 0.1, -10, 10},
    {"reward_death", PARAM_FLOAT, -1, -10, 10},
    {"max_ticks", PARAM_INT, 2000, 10, 1000000},
    {NULL, 0, 0, 0, 0},
};

static void snake_layout(const double* p, Layout* out) {
    int w = (int)PARAM(p, 0), h = (int)PARAM(p, 1), window = 2 * (int)PARAM(p, 4) + 1;
    *out = (Layout){.agents_per_env = (int)PARAM(p, 2), .obs_size = window * window, .obs_dtype = OBS_INT8,
                    .obs_low = 0, .obs_high = 7, .action_dims = 1, .action_n = {4}, .frame_h = h * 8,
                    .frame_w = w * 8, .text_h = h, .text_w = w};
}

static void snake_init(Snake* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->width = (int)PARAM(p, 0);
    env->height = (int)PARAM(p, 1);
    env->num_snakes = (int)PARAM(p, 2);
    env->num_food = (int)PARAM(p, 3);
    env->vision = (int)PARAM(p, 4);
    env->window = 2 * env->vision + 1;
    env->max_len = (int)PARAM(p, 5);
    env->corpses = (int)PARAM(p, 6);
    env->reward_food = (float)PARAM(p, 7);
    env->reward_corpse = (float)PARAM(p, 8);
    env->reward_death = (float)PARAM(p, 9);
    env->max_ticks = (int)PARAM(p, 10);
}

static inline uint8_t snake_colour(int s) { return (uint8_t)(s == 0 ? 7 : 4 + s % 4); }

/* A random cell that is empty or a corpse, as PufferLib draws it (rows below height - 1, columns
 * below width - 1); after 64 misses a scan from a random start. -1 if there is none. */
static int snake_free_cell(Snake* env) {
    for (int t = 0; t < 64; t++) {
        int r = (int)rng_below(&env->rng, (uint32_t)(env->height - 1));
        int c = (int)rng_below(&env->rng, (uint32_t)(env->width - 1));
        uint8_t g = env->grid[r * env->width + c];
        if (g == SNAKE_EMPTY || g == SNAKE_CORPSE) return r * env->width + c;
    }
    int cells = env->width * env->height, start = (int)rng_below(&env->rng, (uint32_t)cells);
    for (int k = 0; k < cells; k++) {
        int i = (start + k) % cells;
        uint8_t g = env->grid[i];
        if (g == SNAKE_EMPTY || g == SNAKE_CORPSE) return i;
    }
    return -1;
}

static void snake_spawn_food(Snake* env) {
    int i = snake_free_cell(env);
    if (i >= 0) env->grid[i] = SNAKE_FOOD;
}

/* Remove snake s from the grid: every other cell from the head (even remaining lengths) a corpse. */
static void snake_remove(Snake* env, int s) {
    for (int len = env->length[s], k = env->head[s]; len > 0; len--) {
        int cell = env->body_r[s][k] * env->width + env->body_c[s][k];
        env->grid[cell] = env->corpses && len % 2 == 0 ? SNAKE_CORPSE : SNAKE_EMPTY;
        k = k == 0 ? SNAKE_MAX_LEN - 1 : k - 1;
    }
    env->length[s] = 0;
}

static void snake_spawn(Snake* env, int s) {
    snake_remove(env, s);
    env->head[s] = 0;
    env->ticks[s] = 0;
    env->returns[s] = 0;
    int i = snake_free_cell(env);
    if (i < 0) return; /* no room: length 0, retried next step */
    env->body_r[s][0] = (uint8_t)(i / env->width);
    env->body_c[s][0] = (uint8_t)(i % env->width);
    env->length[s] = 1;
    env->grid[i] = snake_colour(s);
}

static void snake_observe(Snake* env) {
    int v = env->vision, win = env->window;
    for (int s = 0; s < env->num_snakes; s++) {
        int8_t* o = env->observations + (size_t)s * win * win;
        if (env->length[s] == 0) {
            memset(o, SNAKE_WALL, (size_t)win * win);
            continue;
        }
        int h = env->head[s];
        const uint8_t* g = env->grid + (env->body_r[s][h] - v) * env->width + env->body_c[s][h] - v;
        for (int r = 0; r < win; r++, g += env->width, o += win) memcpy(o, g, (size_t)win);
    }
}

static void snake_reset(Snake* env) {
    int w = env->width, h = env->height, v = env->vision;
    memset(env->grid, SNAKE_EMPTY, sizeof(env->grid));
    for (int r = 0; r < h; r++)
        for (int c = 0; c < w; c++)
            if (r < v || r >= h - v || c < v || c >= w - v) env->grid[r * w + c] = SNAKE_WALL;
    for (int s = 0; s < env->num_snakes; s++) {
        env->length[s] = 0;
        snake_spawn(env, s);
        env->rewards[s] = 0;
        env->terminals[s] = 0;
        env->truncations[s] = 0;
    }
    for (int f = 0; f < env->num_food; f++) snake_spawn_food(env);
    snake_observe(env);
}

static void snake_end_life(Snake* env, int s) {
    float length = (float)env->length[s], lived = (float)env->ticks[s];
    OCEAN_LOG_EPISODE(env->log, length / lived, length, env->returns[s], lived);
    snake_spawn(env, s);
}

static void snake_step(Snake* env) {
    static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
    int w = env->width;
    for (int s = 0; s < env->num_snakes; s++) {
        env->rewards[s] = 0;
        env->terminals[s] = 0;
        env->truncations[s] = 0;
        if (env->length[s] == 0) {
            snake_spawn(env, s);
            continue;
        }
        int a = env->actions[s], h = env->head[s];
        int r = env->body_r[s][h] + dr[a], c = env->body_c[s][h] + dc[a];
        if (env->length[s] > 1) {
            int neck = h == 0 ? SNAKE_MAX_LEN - 1 : h - 1;
            if (r == env->body_r[s][neck] && c == env->body_c[s][neck]) { /* straight on instead */
                r = env->body_r[s][h] - dr[a];
                c = env->body_c[s][h] - dc[a];
            }
        }
        env->ticks[s]++;
        uint8_t tile = env->grid[r * w + c];
        if (tile >= SNAKE_WALL) {
            env->rewards[s] = env->reward_death;
            env->returns[s] += env->reward_death;
            env->terminals[s] = 1;
            snake_end_life(env, s);
            continue;
        }
        int grow = 0;
        if (tile == SNAKE_FOOD) {
            env->rewards[s] = env->reward_food;
            env->returns[s] += env->reward_food;
            snake_spawn_food(env);
            grow = 1;
        } else if (tile == SNAKE_CORPSE) {
            env->rewards[s] = env->reward_corpse;
            env->returns[s] += env->reward_corpse;
            grow = 1;
        }
        h = h + 1 == SNAKE_MAX_LEN ? 0 : h + 1;
        env->head[s] = h;
        env->body_r[s][h] = (uint8_t)r;
        env->body_c[s][h] = (uint8_t)c;
        if (grow && env->length[s] < env->max_len - 1) {
            env->length[s]++;
        } else { /* the tail moves on */
            int tail = h - env->length[s];
            if (tail < 0) tail += SNAKE_MAX_LEN;
            env->grid[env->body_r[s][tail] * w + env->body_c[s][tail]] = SNAKE_EMPTY;
        }
        env->grid[r * w + c] = snake_colour(s);
        if (env->ticks[s] >= env->max_ticks) {
            env->truncations[s] = 1;
            snake_end_life(env, s);
        }
    }
    snake_observe(env);
}

static void snake_render(Snake* env, uint8_t* rgb) {
    static const uint8_t colours[8][3] = {{6, 24, 24},   {0, 0, 255},   {0, 128, 255},   {128, 128, 128},
                                          {255, 0, 0},   {255, 255, 255}, {255, 85, 85}, {170, 170, 170}};
    int w = env->width * 8, h = env->height * 8;
    for (int i = 0; i < env->width * env->height; i++) {
        const uint8_t* col = colours[env->grid[i] & 7];
        fill_rect(rgb, w, h, (i % env->width) * 8, (i / env->width) * 8, 8, 8, col[0], col[1], col[2]);
    }
}

static void snake_render_text(Snake* env, char* text) {
    for (int i = 0; i < env->width * env->height; i++) text[i] = ".*x#abcd"[env->grid[i] & 7];
    for (int s = 0; s < env->num_snakes; s++) {
        if (env->length[s] == 0) continue;
        int h = env->head[s];
        text[env->body_r[s][h] * env->width + env->body_c[s][h]] = (char)('A' + s % 26);
    }
}

static void snake_close(Snake* env) { (void)env; }

OCEAN_ENV(snake, Snake, SnakeLog, "perf", "score", "episode_return", "episode_length", "n")
