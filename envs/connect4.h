/* connect4: PufferLib 3.0's Ocean connect4 rules. The agent (first player) against a scripted
 * opponent.
 *   obs      float32[42]: column by column from the left, bottom cell first: 1 the agent's disc, -1
 *            the opponent's, 0 empty (PufferLib's layout).
 *   action   Discrete(7): the column to drop a disc in. A full column loses the game at once, so a
 *            full board (the opponent drops the 42nd disc) is a loss too.
 *   reward   +1 win, -1 loss, at the end.
 *   perf     1 for a win, else 0.
 * The opponent, as PufferLib's: a two-entry opening book (answers a first disc in column 3 with
 * column 2, in column 4 with column 3), then any immediately winning column (leftmost), else the
 * column whose `depth`-ply exhaustive search (no pruning) scores lowest for the agent: a position's
 * value sums, over every reply, minus the child's value, and a line of four completed with d plies
 * left counts 10^d. Ties are broken at random.
 * Board as two bitboards of 7 columns x (6 + 1 sentinel) bits. The last three plies of the search are
 * counts of winning cells (the same values as PufferLib's, without visiting the leaves).
 */
#include "vecenv.h"

#define C4_W 7
#define C4_H 6
#define C4_BOTTOM 0x40810204081ULL     /* bit 0 of every column */
#define C4_BOARD (C4_BOTTOM * 0x3FULL) /* the 42 playable bits */

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
    uint64_t agent, opp; /* each side's discs */
    int steps;
} Connect4;

static const ParamSpec connect4_params[] = {
    {"depth", PARAM_INT, 3, 0, 5},
    {NULL, 0, 0, 0, 0},
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

static inline uint64_t c4_top(int col) { return 1ULL << (C4_H - 1 + col * (C4_H + 1)); }
static inline int c4_full(uint64_t mask, int col) { return (mask & c4_top(col)) != 0; }
/* The bit a disc dropped in `col` lands on. */
static inline uint64_t c4_drop(uint64_t mask, int col) {
    uint64_t column = (C4_BOARD >> (col * (C4_H + 1)) & 0x3FULL) << (col * (C4_H + 1));
    return (mask + (1ULL << (col * (C4_H + 1)))) & ~mask & column;
}

static inline int c4_four(uint64_t p) {
    uint64_t m = p & (p >> (C4_H + 1)); /* horizontal */
    if (m & (m >> (2 * (C4_H + 1)))) return 1;
    m = p & (p >> C4_H); /* diagonal */
    if (m & (m >> (2 * C4_H))) return 1;
    m = p & (p >> (C4_H + 2)); /* other diagonal */
    if (m & (m >> (2 * (C4_H + 2)))) return 1;
    m = p & (p >> 1); /* vertical */
    return (m & (m >> 2)) != 0;
}

/* Empty cells where a disc would complete four for `p` (reachable or not). */
static inline uint64_t c4_winning_cells(uint64_t p, uint64_t mask) {
    uint64_t r = (p << 1) & (p << 2) & (p << 3);
    static const int dirs[3] = {C4_H + 1, C4_H, C4_H + 2};
    for (int i = 0; i < 3; i++) {
        int s = dirs[i];
        uint64_t q = (p << s) & (p << 2 * s);
        r |= q & (p << 3 * s);
        r |= q & (p >> s);
        q = (p >> s) & (p >> 2 * s);
        r |= q & (p << s);
        r |= q & (p >> 3 * s);
    }
    return r & (C4_BOARD ^ mask);
}

/* A popcount the compiler inlines even without -mpopcnt (the portable build). */
static inline int c4_count(uint64_t x) {
#ifdef __POPCNT__
    return __builtin_popcountll(x);
#else
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (int)((x * 0x0101010101010101ULL) >> 56);
#endif
}

static const int32_t c4_pow10[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

/* Depth 2 without visiting the children: for each of `me`'s moves, -10 if it completes four, else
 * the count of `other`'s immediately winning moves after it (0 on a full board). That count is the
 * one before the move, less the played cell if it was one, plus the cell above it if that is one. */
static inline int32_t c4_value2(uint64_t me, uint64_t other, uint64_t mask) {
    uint64_t mine = c4_winning_cells(me, mask), theirs = c4_winning_cells(other, mask);
    uint64_t playable = (mask + C4_BOTTOM) & C4_BOARD;
    int32_t base = c4_count(theirs & playable), value = 0;
    for (uint64_t cells = playable; cells; cells &= cells - 1) {
        uint64_t cell = cells & (~cells + 1);
        if (cell & mine) {
            value -= 10;
        } else if ((mask | cell) != C4_BOARD) {
            value += base - ((theirs & cell) != 0) + ((theirs & (cell << 1) & C4_BOARD) != 0);
        }
    }
    return value;
}

/* PufferLib's search value for the side to move (`me`), the other side having just moved. Integer
 * arithmetic: PufferLib's floats hold these exact integers. */
static int32_t c4_value(uint64_t me, uint64_t other, int depth) {
    uint64_t mask = me | other;
    if (c4_four(other)) return c4_pow10[depth];
    if (c4_four(me) || depth == 0 || mask == C4_BOARD) return 0;
    if (depth == 1) /* each child is 1 if that move completes four for `me`, else 0 */
        return -c4_count(c4_winning_cells(me, mask) & (mask + C4_BOTTOM));
    if (depth == 2) return c4_value2(me, other, mask);
    int32_t value = 0;
    for (int col = 0; col < C4_W; col++) {
        if (c4_full(mask, col)) continue;
        value -= c4_value(other, me | c4_drop(mask, col), depth - 1);
    }
    return value;
}

static int connect4_opponent_move(Connect4* env) {
    uint64_t mask = env->agent | env->opp;
    if (mask == (1ULL << 3 * (C4_H + 1)) && env->agent == mask) return 2; /* opening book */
    if (mask == (1ULL << 4 * (C4_H + 1)) && env->agent == mask) return 3;
    int32_t values[C4_W], best = INT32_MAX;
    for (int col = 0; col < C4_W; col++) {
        values[col] = INT32_MAX;
        if (c4_full(mask, col)) continue;
        uint64_t mine = env->opp | c4_drop(mask, col);
        if (c4_four(mine)) return col;
        values[col] = -c4_value(env->agent, mine, env->depth);
        if (values[col] < best) best = values[col];
    }
    int ties = 0;
    for (int col = 0; col < C4_W; col++) ties += values[col] == best;
    int pick = (int)rng_below(&env->rng, (uint32_t)ties);
    for (int col = 0; col < C4_W; col++)
        if (values[col] == best && pick-- == 0) return col;
    return 0;
}

static inline void c4_mark(Connect4* env, uint64_t bit, float who) {
    int i = __builtin_ctzll(bit);
    env->observations[(i / (C4_H + 1)) * C4_H + i % (C4_H + 1)] = who;
}

static void connect4_reset(Connect4* env) {
    env->agent = env->opp = 0;
    env->steps = 0;
    memset(env->observations, 0, 42 * sizeof(float));
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
}

static void connect4_finish(Connect4* env, float result) {
    OCEAN_LOG_EPISODE(env->log, result > 0 ? 1.0f : 0.0f, result, result, (float)env->steps);
    connect4_reset(env);
    env->rewards[0] = result;
    env->terminals[0] = 1;
}

static void connect4_step(Connect4* env) {
    int col = env->actions[0];
    env->steps++;
    uint64_t mask = env->agent | env->opp;
    if (c4_full(mask, col)) {
        connect4_finish(env, -1); /* a full column loses */
        return;
    }
    uint64_t drop = c4_drop(mask, col);
    env->agent |= drop;
    c4_mark(env, drop, 1);
    if (c4_four(env->agent)) {
        connect4_finish(env, 1);
        return;
    }
    drop = c4_drop(env->agent | env->opp, connect4_opponent_move(env));
    env->opp |= drop;
    c4_mark(env, drop, -1);
    if (c4_four(env->opp)) {
        connect4_finish(env, -1);
        return;
    }
    env->rewards[0] = 0;
    env->terminals[0] = 0;
}

static void connect4_render(Connect4* env, uint8_t* rgb) {
    int w = C4_W * 16, h = C4_H * 16;
    fill_rect(rgb, w, h, 0, 0, w, h, 30, 60, 160);
    for (int r = 0; r < C4_H; r++) {
        for (int c = 0; c < C4_W; c++) {
            uint64_t bit = 1ULL << (c * (C4_H + 1) + (C4_H - 1 - r));
            uint8_t R = 20, G = 20, B = 40;
            if (env->agent & bit) R = 230, G = 200, B = 40;
            else if (env->opp & bit) R = 220, G = 50, B = 50;
            fill_rect(rgb, w, h, c * 16 + 2, r * 16 + 2, 12, 12, R, G, B);
        }
    }
}

static void connect4_render_text(Connect4* env, char* text) {
    for (int r = 0; r < C4_H; r++) {
        for (int c = 0; c < C4_W; c++) {
            uint64_t bit = 1ULL << (c * (C4_H + 1) + (C4_H - 1 - r));
            text[r * C4_W + c] = (env->agent & bit) ? 'X' : ((env->opp & bit) ? 'O' : '.');
        }
    }
}

static void connect4_close(Connect4* env) { (void)env; }

OCEAN_ENV(connect4, Connect4, Connect4Log, "perf", "score", "episode_return", "episode_length", "n")
