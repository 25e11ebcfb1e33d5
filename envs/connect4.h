/* connect4: the agent (first player) against a scripted negamax opponent.
 *   obs      float32[42]: the 6x7 board, top row first: 1 the agent's disc, -1 the opponent's, 0 empty.
 *   action   Discrete(7): the column to drop a disc in. A full column loses the game at once.
 *   reward   +1 win, -1 loss, 0 draw, given at the end.
 *   perf     (reward + 1) / 2: 1 a win, 0.5 a draw, 0 a loss.
 * The opponent searches `depth` plies with alpha-beta (depth 0 plays uniformly at random), scores
 * quicker wins higher and breaks ties between equally good columns at random.
 * Board as two bitboards of 7 columns x (6 + 1 sentinel) bits.
 */
#include "vecenv.h"

#define C4_W 7
#define C4_H 6
#define C4_WIN 1000

typedef struct Connect4Log {
    float perf, score, episode_return, episode_length, n;
} Connect4Log;

typedef struct Connect4 {
    Connect4Log log;
    Rng rng;
    float* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int depth;
    uint64_t agent, mask;
    int moves;
} Connect4;

static const ParamSpec connect4_params[] = {
    {"depth", 2, 0, 8},
    {NULL, 0, 0, 0},
};

static void connect4_layout(const double* p, Layout* out) {
    (void)p;
    *out = (Layout){.agents_per_env = 1, .obs_size = 42, .obs_dtype = OBS_FLOAT32, .obs_low = -1, .obs_high = 1,
                    .action_dims = 1, .action_n = {7}, .frame_h = C4_H * 16, .frame_w = C4_W * 16,
                    .text_h = C4_H, .text_w = C4_W};
}

static void connect4_init(Connect4* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->depth = (int)PARAM(p, 0);
}

static inline uint64_t c4_bottom(int col) { return 1ULL << (col * (C4_H + 1)); }
static inline uint64_t c4_top(int col) { return 1ULL << (C4_H - 1 + col * (C4_H + 1)); }
static inline int c4_can_play(uint64_t mask, int col) { return (mask & c4_top(col)) == 0; }
static inline uint64_t c4_drop(uint64_t mask, int col) { return (mask + c4_bottom(col)) & ~mask & (c4_bottom(col) * 0x3FULL); }

static inline int c4_four(uint64_t p) {
    static const int shifts[4] = {1, C4_H + 1, C4_H, C4_H + 2}; /* vertical, horizontal, two diagonals */
    for (int i = 0; i < 4; i++) {
        uint64_t m = p & (p >> shifts[i]);
        if (m & (m >> (2 * shifts[i]))) return 1;
    }
    return 0;
}

static const int c4_order[C4_W] = {3, 2, 4, 1, 5, 0, 6};

/* Score for the player to move, who owns `cur`; opponent owns mask ^ cur. */
static int c4_negamax(uint64_t cur, uint64_t mask, int depth, int alpha, int beta, int moves) {
    for (int k = 0; k < C4_W; k++) {
        int col = c4_order[k];
        if (c4_can_play(mask, col) && c4_four(cur | c4_drop(mask, col))) return C4_WIN - moves;
    }
    if (moves >= C4_W * C4_H - 1) return 0;
    if (depth == 0) {
        uint64_t centre = 0x7FULL << (3 * (C4_H + 1));
        return __builtin_popcountll(cur & centre) - __builtin_popcountll((mask ^ cur) & centre);
    }
    int best = -C4_WIN * 2;
    for (int k = 0; k < C4_W; k++) {
        int col = c4_order[k];
        if (!c4_can_play(mask, col)) continue;
        uint64_t next_mask = mask | c4_drop(mask, col);
        int score = -c4_negamax(cur ^ mask, next_mask, depth - 1, -beta, -alpha, moves + 1);
        if (score > best) best = score;
        if (score > alpha) alpha = score;
        if (alpha >= beta) break;
    }
    return best;
}

static int connect4_opponent_move(Connect4* env) {
    uint64_t opp = env->mask ^ env->agent;
    int cols[C4_W], n = 0, best = -C4_WIN * 4;
    for (int col = 0; col < C4_W; col++) {
        if (!c4_can_play(env->mask, col)) continue;
        int score = 0;
        if (env->depth > 0) {
            uint64_t drop = c4_drop(env->mask, col);
            if (c4_four(opp | drop)) score = C4_WIN;
            else score = -c4_negamax(env->agent, env->mask | drop, env->depth - 1, -C4_WIN * 2, C4_WIN * 2, env->moves + 1);
        }
        if (score > best) {
            best = score;
            n = 0;
        }
        if (score == best) cols[n++] = col;
    }
    return n ? cols[rng_below(&env->rng, (uint32_t)n)] : -1;
}

static void connect4_observe(Connect4* env) {
    float* o = env->observations;
    for (int r = 0; r < C4_H; r++) {
        for (int c = 0; c < C4_W; c++) {
            uint64_t bit = 1ULL << (c * (C4_H + 1) + (C4_H - 1 - r));
            o[r * C4_W + c] = (env->agent & bit) ? 1.0f : ((env->mask & bit) ? -1.0f : 0.0f);
        }
    }
}

static void connect4_reset(Connect4* env) {
    env->agent = env->mask = 0;
    env->moves = 0;
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    connect4_observe(env);
}

static void connect4_finish(Connect4* env, float result) {
    OCEAN_LOG_EPISODE(env->log, (result + 1) / 2, result, result, (float)((env->moves + 1) / 2));
    connect4_reset(env);
    env->rewards[0] = result;
    env->terminals[0] = 1;
}

static void connect4_step(Connect4* env) {
    int col = env->actions[0];
    env->truncations[0] = 0;
    if (!c4_can_play(env->mask, col)) {
        connect4_finish(env, -1); /* a full column loses */
        return;
    }
    uint64_t drop = c4_drop(env->mask, col);
    env->agent |= drop;
    env->mask |= drop;
    env->moves++;
    if (c4_four(env->agent)) {
        connect4_finish(env, 1);
        return;
    }
    if (env->moves == C4_W * C4_H) {
        connect4_finish(env, 0);
        return;
    }
    int reply = connect4_opponent_move(env);
    env->mask |= c4_drop(env->mask, reply);
    env->moves++;
    if (c4_four(env->mask ^ env->agent)) {
        connect4_finish(env, -1);
        return;
    }
    if (env->moves == C4_W * C4_H) {
        connect4_finish(env, 0);
        return;
    }
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    connect4_observe(env);
}

static void connect4_render(Connect4* env, uint8_t* rgb) {
    int w = C4_W * 16, h = C4_H * 16;
    fill_rect(rgb, w, h, 0, 0, w, h, 30, 60, 160);
    for (int r = 0; r < C4_H; r++) {
        for (int c = 0; c < C4_W; c++) {
            uint64_t bit = 1ULL << (c * (C4_H + 1) + (C4_H - 1 - r));
            uint8_t R = 20, G = 20, B = 40;
            if (env->agent & bit) R = 230, G = 200, B = 40;
            else if (env->mask & bit) R = 220, G = 50, B = 50;
            fill_rect(rgb, w, h, c * 16 + 2, r * 16 + 2, 12, 12, R, G, B);
        }
    }
}

static void connect4_render_text(Connect4* env, char* text) {
    for (int r = 0; r < C4_H; r++) {
        for (int c = 0; c < C4_W; c++) {
            uint64_t bit = 1ULL << (c * (C4_H + 1) + (C4_H - 1 - r));
            text[r * C4_W + c] = (env->agent & bit) ? 'X' : ((env->mask & bit) ? 'O' : '.');
        }
    }
}

static void connect4_close(Connect4* env) { (void)env; }

OCEAN_ENV(connect4, Connect4, Connect4Log, "perf", "score", "episode_return", "episode_length", "n")
