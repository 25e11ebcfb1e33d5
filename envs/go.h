/* go: 9x9 Go, the agent (black, first to play) against a scripted greedy opponent (white).
 *   obs      int8[162]: the board from the agent's side (1 own stone, -1 opponent, 0 empty), then
 *            81 legal-move flags for the agent (1 legal).
 *   action   Discrete(82): a point (row * 9 + col) or 81 to pass. An illegal point (occupied,
 *            suicide, or retaking a ko) counts as a pass and is logged in `illegal`.
 *   reward   +1 if the agent wins, -1 if it loses, at the end: two passes in a row or max_moves.
 *            Tromp-Taylor area scoring (stones plus empty regions that reach only one colour),
 *            white gets `komi`.
 *   perf     1 for a win, 0 for a loss; score = black area - white area - komi.
 * The opponent plays the legal move that captures the most stones, else a random legal move that
 * does not fill one of its own eyes; it passes when it has none, or when the agent passed and
 * white is ahead.
 */
#include "vecenv.h"

#define GO_N 9
#define GO_CELLS (GO_N * GO_N)
#define GO_PASS GO_CELLS

typedef struct GoLog {
    float perf, score, episode_return, episode_length, illegal, n;
} GoLog;

typedef struct Go {
    GoLog log;
    Rng rng;
    int8_t* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    float komi;
    int max_moves;
    int8_t board[GO_CELLS]; /* 1 black (agent), -1 white, 0 empty */
    int ko;                  /* point the next player may not take, -1 none */
    int moves, passes, illegal;
} Go;

static const ParamSpec go_params[] = {
    {"komi", 7.5, 0, 20},
    {"max_moves", 200, 10, 2000},
    {NULL, 0, 0, 0},
};

static void go_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = 2 * GO_CELLS, .obs_dtype = OBS_INT8, .obs_low = -1,
                    .obs_high = 1, .action_dims = 1, .action_n = {GO_CELLS + 1}, .frame_h = GO_N * 12,
                    .frame_w = GO_N * 12, .text_h = GO_N, .text_w = GO_N};
}

static void go_init(Go* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->komi = (float)PARAM(p, 0);
    env->max_moves = (int)PARAM(p, 1);
}

/* Neighbours of p into nb[]; returns how many (2 to 4). */
static inline int go_neighbours(int p, int nb[4]) {
    int r = p / GO_N, c = p % GO_N, n = 0;
    if (r > 0) nb[n++] = p - GO_N;
    if (r < GO_N - 1) nb[n++] = p + GO_N;
    if (c > 0) nb[n++] = p - 1;
    if (c < GO_N - 1) nb[n++] = p + 1;
    return n;
}

/* Size of the group at `start`; *free is set if it has a liberty other than `except`. The group's
 * stones are marked in seen[] (zeroed by the caller), so neighbours in one group are counted once. */
static int go_group(const int8_t* board, int start, int except, int* free, uint8_t* seen) {
    int stack[GO_CELLS], top = 0, size = 0;
    int8_t color = board[start];
    stack[top++] = start;
    seen[start] = 1;
    *free = 0;
    while (top) {
        int p = stack[--top];
        size++;
        int nb[4], n = go_neighbours(p, nb);
        for (int k = 0; k < n; k++) {
            int q = nb[k];
            if (seen[q]) continue;
            if (board[q] == 0 && q != except) *free = 1;
            else if (board[q] == color) {
                seen[q] = 1;
                stack[top++] = q;
            }
        }
    }
    return size;
}

/* Stones `color` would capture by playing p, or -1 if the move is illegal. */
static int go_try(const Go* env, int p, int8_t color) {
    if (p < 0 || p >= GO_CELLS || env->board[p] != 0 || p == env->ko) return -1;
    int nb[4], n = go_neighbours(p, nb), captures = 0, safe = 0, free;
    uint8_t seen[GO_CELLS];
    memset(seen, 0, sizeof(seen));
    for (int k = 0; k < n; k++) {
        int q = nb[k];
        if (env->board[q] == 0) {
            safe = 1;
        } else if (!seen[q]) {
            int size = go_group(env->board, q, p, &free, seen);
            if (env->board[q] == color ? free : !free) safe = 1; /* own group keeps a liberty, or a capture */
            if (env->board[q] != color && !free) captures += size;
        }
    }
    return safe ? captures : -1;
}

static void go_remove_group(Go* env, int start) {
    int stack[GO_CELLS], top = 0;
    int8_t color = env->board[start];
    stack[top++] = start;
    env->board[start] = 0;
    while (top) {
        int p = stack[--top];
        int nb[4], n = go_neighbours(p, nb);
        for (int k = 0; k < n; k++) {
            if (env->board[nb[k]] == color) {
                env->board[nb[k]] = 0;
                stack[top++] = nb[k];
            }
        }
    }
}

/* Play a legal move (checked by go_try) and update the ko point. */
static void go_play(Go* env, int p, int8_t color) {
    env->board[p] = color;
    int nb[4], n = go_neighbours(p, nb), captured = 0, last = -1, free;
    uint8_t seen[GO_CELLS];
    for (int k = 0; k < n; k++) {
        int q = nb[k];
        if (env->board[q] != -color) continue;
        memset(seen, 0, sizeof(seen));
        int size = go_group(env->board, q, -1, &free, seen);
        if (!free) {
            captured += size;
            last = q;
            go_remove_group(env, q);
        }
    }
    env->ko = -1;
    if (captured == 1) {
        memset(seen, 0, sizeof(seen));
        int size = go_group(env->board, p, -1, &free, seen);
        int libs = 0;
        for (int k = 0; k < n; k++) libs += env->board[nb[k]] == 0;
        if (size == 1 && libs == 1) env->ko = last;
    }
}

/* Tromp-Taylor: black area - white area (without komi). */
static int go_area(const Go* env) {
    uint8_t seen[GO_CELLS];
    int stack[GO_CELLS];
    memset(seen, 0, sizeof(seen));
    int score = 0;
    for (int p = 0; p < GO_CELLS; p++) {
        if (env->board[p]) {
            score += env->board[p];
            continue;
        }
        if (seen[p]) continue;
        int top = 0, size = 0, black = 0, white = 0;
        stack[top++] = p;
        seen[p] = 1;
        while (top) {
            int q = stack[--top];
            size++;
            int nb[4], n = go_neighbours(q, nb);
            for (int k = 0; k < n; k++) {
                int8_t v = env->board[nb[k]];
                if (v == 1) black = 1;
                else if (v == -1) white = 1;
                else if (!seen[nb[k]]) {
                    seen[nb[k]] = 1;
                    stack[top++] = nb[k];
                }
            }
        }
        if (black && !white) score += size;
        if (white && !black) score -= size;
    }
    return score;
}

static void go_observe(Go* env) {
    int8_t* o = env->observations;
    memcpy(o, env->board, GO_CELLS);
    for (int p = 0; p < GO_CELLS; p++) o[GO_CELLS + p] = (int8_t)(go_try(env, p, 1) >= 0);
}

static void go_reset(Go* env) {
    memset(env->board, 0, sizeof(env->board));
    env->ko = -1;
    env->moves = env->passes = env->illegal = 0;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    go_observe(env);
}

static int go_is_own_eye(const Go* env, int p, int8_t color) {
    int nb[4], n = go_neighbours(p, nb);
    for (int k = 0; k < n; k++)
        if (env->board[nb[k]] != color) return 0;
    return 1;
}

static int go_opponent_move(Go* env, int agent_passed) {
    if (agent_passed && (float)go_area(env) < env->komi) return GO_PASS; /* white is ahead: end it */
    int best = -1, count = 0, choice = GO_PASS;
    for (int p = 0; p < GO_CELLS; p++) {
        int captures = go_try(env, p, -1);
        if (captures < 0 || (captures == 0 && go_is_own_eye(env, p, -1))) continue;
        if (captures > best) {
            best = captures;
            count = 0;
        }
        if (captures == best && rng_below(&env->rng, (uint32_t)++count) == 0) choice = p; /* reservoir tie-break */
    }
    return choice;
}

static void go_finish(Go* env, int truncated) {
    float score = (float)go_area(env) - env->komi;
    float result = score > 0 ? 1.0f : -1.0f;
    env->log.illegal += (float)env->illegal;
    OCEAN_LOG_EPISODE(env->log, result > 0 ? 1.0f : 0.0f, score, result, (float)((env->moves + 1) / 2));
    go_reset(env);
    env->rewards[0] = result;
    env->terminals[0] = (uint8_t)!truncated;
    env->truncations[0] = (uint8_t)truncated;
}

static void go_step(Go* env) {
    int a = env->actions[0];
    int agent_passed = a == GO_PASS;
    if (!agent_passed) {
        if (go_try(env, a, 1) < 0) {
            env->illegal++;
            agent_passed = 1;
        } else {
            go_play(env, a, 1);
        }
    }
    if (agent_passed) env->ko = -1;
    env->passes = agent_passed ? env->passes + 1 : 0;
    env->moves++;
    if (env->passes >= 2) {
        go_finish(env, 0);
        return;
    }
    int reply = go_opponent_move(env, agent_passed);
    if (reply == GO_PASS) {
        env->passes++;
        env->ko = -1;
    } else {
        go_play(env, reply, -1);
        env->passes = 0;
    }
    env->moves++;
    if (env->passes >= 2) {
        go_finish(env, 0);
        return;
    }
    if (env->moves >= env->max_moves) {
        go_finish(env, 1);
        return;
    }
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    go_observe(env);
}

static void go_render(Go* env, uint8_t* rgb) {
    int w = GO_N * 12;
    fill_rect(rgb, w, w, 0, 0, w, w, 200, 160, 90);
    for (int i = 0; i < GO_N; i++) {
        fill_rect(rgb, w, w, 6, i * 12 + 6, w - 12, 1, 60, 40, 20);
        fill_rect(rgb, w, w, i * 12 + 6, 6, 1, w - 12, 60, 40, 20);
    }
    for (int p = 0; p < GO_CELLS; p++) {
        if (!env->board[p]) continue;
        uint8_t v = env->board[p] > 0 ? 20 : 235;
        fill_rect(rgb, w, w, (p % GO_N) * 12 + 2, (p / GO_N) * 12 + 2, 9, 9, v, v, v);
    }
}

static void go_render_text(Go* env, char* text) {
    for (int p = 0; p < GO_CELLS; p++) text[p] = env->board[p] > 0 ? 'X' : (env->board[p] < 0 ? 'O' : '+');
}

static void go_close(Go* env) { (void)env; }

OCEAN_ENV(go, Go, GoLog, "perf", "score", "episode_return", "episode_length", "illegal", "n")
