/* snake: several snakes share one grid (multi-agent: one agent row per snake).
 *   obs      int8[121]: an 11x11 view centred on the snake's head: 0 empty, 1 food, 2 wall (outside
 *            the grid), 3 its own body, 4 another snake.
 *   action   Discrete(4): 0 up, 1 down, 2 left, 3 right. Turning back onto the neck keeps going straight.
 *   reward   +food_reward for eating (the snake grows up to max_length), -1 for hitting a wall or a
 *            body; a dead snake is logged and respawns at once with length 1. A life longer than
 *            max_ticks is truncated.
 *   perf     (length - 1) / (max_length - 1) at the end of a life.
 * Snakes move in index order within a step, so results are deterministic for a seed.
 */
#include "vecenv.h"

#define SNAKE_MAX_GRID 48
#define SNAKE_MAX_SNAKES 16
#define SNAKE_MAX_LEN 128
#define SNAKE_VIEW 5
#define SNAKE_OBS ((2 * SNAKE_VIEW + 1) * (2 * SNAKE_VIEW + 1))

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
    int width, height, num_snakes, num_food, max_length, max_ticks;
    float food_reward;
    int food_present;
    uint8_t grid[SNAKE_MAX_GRID * SNAKE_MAX_GRID]; /* 0 empty, 1 food, 2 + snake index */
    uint8_t body_r[SNAKE_MAX_SNAKES][SNAKE_MAX_LEN], body_c[SNAKE_MAX_SNAKES][SNAKE_MAX_LEN];
    int head[SNAKE_MAX_SNAKES], length[SNAKE_MAX_SNAKES], dir[SNAKE_MAX_SNAKES], alive[SNAKE_MAX_SNAKES];
    int ticks[SNAKE_MAX_SNAKES];
    float returns[SNAKE_MAX_SNAKES];
} Snake;

static const ParamSpec snake_params[] = {
    {"width", 24, 8, SNAKE_MAX_GRID},
    {"height", 24, 8, SNAKE_MAX_GRID},
    {"num_snakes", 4, 1, SNAKE_MAX_SNAKES},
    {"num_food", 8, 1, 256},
    {"max_length", 64, 2, SNAKE_MAX_LEN},
    {"food_reward", 0.1, 0, 1},
    {"max_ticks", 2000, 10, 1000000},
    {NULL, 0, 0, 0},
};

static void snake_layout(const double* p, Layout* out) {
    int w = (int)PARAM(p, 0), h = (int)PARAM(p, 1);
    *out = (Layout){.agents_per_env = (int)PARAM(p, 2), .obs_size = SNAKE_OBS, .obs_dtype = OBS_INT8, .obs_low = 0,
                    .obs_high = 4, .action_dims = 1, .action_n = {4}, .frame_h = h * 8, .frame_w = w * 8,
                    .text_h = h, .text_w = w};
}

static void snake_init(Snake* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->width = (int)PARAM(p, 0);
    env->height = (int)PARAM(p, 1);
    env->num_snakes = (int)PARAM(p, 2);
    env->num_food = (int)PARAM(p, 3);
    env->max_length = (int)PARAM(p, 4);
    env->food_reward = (float)PARAM(p, 5);
    env->max_ticks = (int)PARAM(p, 6);
}

/* A random empty cell: a few random tries, then a scan from a random start. -1 if the grid is full. */
static int snake_empty_cell(Snake* env) {
    int cells = env->width * env->height;
    for (int t = 0; t < 32; t++) {
        int i = (int)rng_below(&env->rng, (uint32_t)cells);
        if (env->grid[i] == 0) return i;
    }
    int start = (int)rng_below(&env->rng, (uint32_t)cells);
    for (int k = 0; k < cells; k++) {
        int i = (start + k) % cells;
        if (env->grid[i] == 0) return i;
    }
    return -1;
}

static void snake_place_food(Snake* env) {
    while (env->food_present < env->num_food) {
        int i = snake_empty_cell(env);
        if (i < 0) return;
        env->grid[i] = 1;
        env->food_present++;
    }
}

static void snake_spawn(Snake* env, int s) {
    int i = snake_empty_cell(env);
    env->alive[s] = i >= 0;
    env->length[s] = 1;
    env->head[s] = 0;
    env->ticks[s] = 0;
    env->returns[s] = 0;
    env->dir[s] = (int)rng_below(&env->rng, 4);
    if (i < 0) return; /* grid full: retried next step */
    env->body_r[s][0] = (uint8_t)(i / env->width);
    env->body_c[s][0] = (uint8_t)(i % env->width);
    env->grid[i] = (uint8_t)(2 + s);
}

static void snake_observe(Snake* env) {
    for (int s = 0; s < env->num_snakes; s++) {
        int8_t* o = env->observations + (size_t)s * SNAKE_OBS;
        int hr = env->body_r[s][env->head[s]], hc = env->body_c[s][env->head[s]];
        for (int dr = -SNAKE_VIEW; dr <= SNAKE_VIEW; dr++) {
            for (int dc = -SNAKE_VIEW; dc <= SNAKE_VIEW; dc++) {
                int r = hr + dr, c = hc + dc;
                int8_t v;
                if (!env->alive[s]) v = 0;
                else if (r < 0 || c < 0 || r >= env->height || c >= env->width) v = 2;
                else {
                    uint8_t g = env->grid[r * env->width + c];
                    v = g == 0 ? 0 : g == 1 ? 1 : (g == 2 + s ? 3 : 4);
                }
                *o++ = v;
            }
        }
    }
}

static void snake_reset(Snake* env) {
    memset(env->grid, 0, sizeof(env->grid));
    env->food_present = 0;
    for (int s = 0; s < env->num_snakes; s++) {
        snake_spawn(env, s);
        env->rewards[s] = 0;
        env->terminals[s] = 0;
        env->truncations[s] = 0;
    }
    snake_place_food(env);
    snake_observe(env);
}

static void snake_end_life(Snake* env, int s) {
    float len = (float)env->length[s];
    OCEAN_LOG_EPISODE(env->log, (len - 1) / (float)(env->max_length - 1), len, env->returns[s], (float)env->ticks[s]);
    for (int k = 0; k < env->length[s]; k++) {
        int idx = (env->head[s] - k + SNAKE_MAX_LEN) % SNAKE_MAX_LEN;
        env->grid[env->body_r[s][idx] * env->width + env->body_c[s][idx]] = 0;
    }
    snake_spawn(env, s);
}

static void snake_step(Snake* env) {
    static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
    static const int opposite[4] = {1, 0, 3, 2};
    for (int s = 0; s < env->num_snakes; s++) {
        env->rewards[s] = 0;
        env->terminals[s] = 0;
        env->truncations[s] = 0;
        if (!env->alive[s]) {
            snake_spawn(env, s);
            continue;
        }
        int a = env->actions[s];
        if (!(env->length[s] > 1 && a == opposite[env->dir[s]])) env->dir[s] = a;
        int h = env->head[s];
        int r = env->body_r[s][h] + dr[env->dir[s]], c = env->body_c[s][h] + dc[env->dir[s]];
        env->ticks[s]++;
        if (r < 0 || c < 0 || r >= env->height || c >= env->width || env->grid[r * env->width + c] >= 2) {
            env->rewards[s] = -1;
            env->returns[s] -= 1;
            env->terminals[s] = 1;
            snake_end_life(env, s);
            continue;
        }
        int cell = r * env->width + c;
        int ate = env->grid[cell] == 1;
        if (ate) {
            env->food_present--;
            env->rewards[s] = env->food_reward;
            env->returns[s] += env->food_reward;
        }
        if (!ate || env->length[s] >= env->max_length) {
            /* the tail moves on (eating at max_length keeps the length) */
            int tail = (h - env->length[s] + 1 + SNAKE_MAX_LEN) % SNAKE_MAX_LEN;
            env->grid[env->body_r[s][tail] * env->width + env->body_c[s][tail]] = 0;
        } else {
            env->length[s]++;
        }
        h = (h + 1) % SNAKE_MAX_LEN;
        env->head[s] = h;
        env->body_r[s][h] = (uint8_t)r;
        env->body_c[s][h] = (uint8_t)c;
        env->grid[cell] = (uint8_t)(2 + s);
        if (env->ticks[s] >= env->max_ticks) {
            env->truncations[s] = 1;
            snake_end_life(env, s);
        }
    }
    snake_place_food(env);
    snake_observe(env);
}

static void snake_render(Snake* env, uint8_t* rgb) {
    int w = env->width * 8, h = env->height * 8;
    for (int i = 0; i < env->width * env->height; i++) {
        uint8_t g = env->grid[i];
        if (!g) continue;
        int x = (i % env->width) * 8, y = (i / env->width) * 8;
        if (g == 1) fill_rect(rgb, w, h, x + 2, y + 2, 4, 4, 220, 60, 60);
        else {
            uint32_t hue = (uint32_t)(g - 2) * 2654435761u;
            fill_rect(rgb, w, h, x, y, 7, 7, (uint8_t)(80 + (hue >> 24) % 150), (uint8_t)(80 + (hue >> 16) % 150),
                      (uint8_t)(80 + (hue >> 8) % 150));
        }
    }
}

static void snake_render_text(Snake* env, char* text) {
    for (int i = 0; i < env->width * env->height; i++) {
        uint8_t g = env->grid[i];
        text[i] = g == 0 ? '.' : g == 1 ? '*' : (char)('a' + (g - 2));
    }
    for (int s = 0; s < env->num_snakes; s++) {
        if (!env->alive[s]) continue;
        int h = env->head[s];
        text[env->body_r[s][h] * env->width + env->body_c[s][h]] = (char)('A' + s);
    }
}

static void snake_close(Snake* env) { (void)env; }

OCEAN_ENV(snake, Snake, SnakeLog, "perf", "score", "episode_return", "episode_length", "n")
