/* go: PufferLib 3.0's Ocean go rules. The agent (black, 1) against a scripted opponent (white, 2) on
 * a 7x7 board by default.
 *   obs      float32[2*n*n + 2]: black stones (1), white stones (1), then the captures each side has
 *            counted (raw counts, as PufferLib's).
 *   action   Discrete(n*n + 1): 0 passes, p + 1 plays point p (row * n + col).
 *   reward   shaped, as PufferLib's go.ini: reward_move_pass for a pass, reward_move_valid or
 *            reward_move_invalid for a point (an occupied point, a suicide; a capture that recreates
 *            the board before the agent's move is refused to the opponent only), then
 *            reward_opponent_capture per black stone the opponent captures, even in a move it then
 *            finds illegal (PufferLib counts those). Clamped to [-1, 1] after a point. The game
 *            ends when the opponent has no legal point or after 3*n*n steps; the last reward is
 *            then the result: +1 win, -1 loss, 0 tie, by Tromp-Taylor area minus komi (with
 *            PufferLib's rule that an empty region touching an already-counted empty point is
 *            neutral).
 *   opponent PufferLib's greedy_hard: for each black stone whose group has 1-4 liberties (fewest
 *            first), and each white stone in atari, the first liberty its group's breadth-first
 *            search meets; the first of these it can play, else a random legal point.
 *   perf     1 for a win; score = black area - white area - komi.
 */
#include "vecenv.h"

#define GO_MAX_N 19
#define GO_MAX_CELLS (GO_MAX_N * GO_MAX_N)

typedef struct GoLog {
    float perf, score, episode_return, episode_length, n;
} GoLog;

typedef struct GoGroups {
    int16_t parent[GO_MAX_CELLS], rank[GO_MAX_CELLS], liberties[GO_MAX_CELLS];
} GoGroups;

typedef struct Go {
    GoLog log;
    Rng rng;
    float* observations;
    int32_t* actions;
    float* rewards;
    uint8_t* terminals;
    uint8_t* truncations;
    int n, cells, tick, max_ticks;
    float komi, r_pass, r_invalid, r_valid, r_player_capture, r_opponent_capture;
    float reward, episode_return, score;
    int captures[2];
    int game_over, terminal_at_game_end;
    uint16_t stamp;
    uint16_t visited[GO_MAX_CELLS]; /* == stamp: visited in the current search */
    int8_t board[GO_MAX_CELLS], previous[GO_MAX_CELLS], temp[GO_MAX_CELLS];
    GoGroups groups, temp_groups;
    int16_t queue[GO_MAX_CELLS], affected[4 * GO_MAX_CELLS], targets[4][GO_MAX_CELLS], order[GO_MAX_CELLS];
} Go;

static const ParamSpec go_params[] = {
    {"grid_size", PARAM_INT, 7, 3, GO_MAX_N},
    {"komi", PARAM_FLOAT, 7.5, -100, 100},
    {"reward_move_pass", PARAM_FLOAT, -0.6026362603175613, -1, 1},
    {"reward_move_invalid", PARAM_FLOAT, -0.5393516480382454, -1, 1},
    {"reward_move_valid", PARAM_FLOAT, 0, -1, 1},
    {"reward_player_capture", PARAM_FLOAT, 0.42122681325442923, -1, 1},
    {"reward_opponent_capture", PARAM_FLOAT, -0.3152783593705354, -1, 1},
    /* 1: a game's end raises the terminal flag; 0: the board is reset without it, as PufferLib 3.0's
     * go does (its trainer then bootstraps values across games) */
    {"terminal_at_game_end", PARAM_INT, 1, 0, 1},
    {NULL, 0, 0, 0, 0},
};

static void go_layout(const double* p, Layout* out) {
    int n = (int)PARAM(p, 0);
    /* two 0/1 board planes, then both sides' capture counts: a game lasts 3 n^2 steps and a side can
     * only capture stones the other placed, so a count stays within 3 n^2 */
    *out = (Layout){.agents_per_env = 1, .obs_size = 2 * n * n + 2, .obs_dtype = OBS_FLOAT32, .obs_low = 0,
                    .obs_high = 1, .obs_tail = 2, .tail_low = 0, .tail_high = 3.0f * n * n, .action_dims = 1, .action_n = {n * n + 1}, .frame_h = n * 12,
                    .frame_w = n * 12, .text_h = n, .text_w = n};
}

static void go_init(Go* env, const double* p, Buffers b, Rng rng) {
    OCEAN_BIND(env, b, rng);
    env->n = (int)PARAM(p, 0);
    env->cells = env->n * env->n;
    env->max_ticks = 3 * env->cells;
    env->komi = (float)PARAM(p, 1);
    env->r_pass = (float)PARAM(p, 2);
    env->r_invalid = (float)PARAM(p, 3);
    env->r_valid = (float)PARAM(p, 4);
    env->r_player_capture = (float)PARAM(p, 5);
    env->r_opponent_capture = (float)PARAM(p, 6);
    env->terminal_at_game_end = (int)PARAM(p, 7);
}

/* A fresh search: nothing visited (a stamp, not a clear of the array). */
static inline void go_new_search(Go* env) {
    if (++env->stamp == 0) {
        memset(env->visited, 0, sizeof(env->visited));
        env->stamp = 1;
    }
}

/* The up-to-4 neighbours of p, in PufferLib's order: x - 1, x + 1, y - 1, y + 1. */
static inline int go_neighbours(const Go* env, int p, int* out) {
    int n = env->n, x = p % n, y = p / n, k = 0;
    if (x > 0) out[k++] = p - 1;
    if (x < n - 1) out[k++] = p + 1;
    if (y > 0) out[k++] = p - n;
    if (y < n - 1) out[k++] = p + n;
    return k;
}

static int go_find(GoGroups* g, int x) {
    int root = x;
    while (g->parent[root] != root) root = g->parent[root];
    while (g->parent[x] != root) { /* path compression */
        int next = g->parent[x];
        g->parent[x] = (int16_t)root;
        x = next;
    }
    return root;
}

/* Union by rank; on equal ranks the first group's root wins. */
static void go_union(GoGroups* g, int a, int b) {
    a = go_find(g, a);
    b = go_find(g, b);
    if (a == b) return;
    if (g->rank[a] < g->rank[b]) {
        g->parent[a] = (int16_t)b;
    } else {
        g->parent[b] = (int16_t)a;
        if (g->rank[a] == g->rank[b]) g->rank[a]++;
    }
}

static void go_observe(Go* env) {
    float* o = env->observations;
    int c = env->cells;
    for (int i = 0; i < c; i++) {
        o[i] = env->board[i] == 1 ? 1.0f : 0.0f;
        o[c + i] = env->board[i] == 2 ? 1.0f : 0.0f;
    }
    o[2 * c] = (float)env->captures[0];
    o[2 * c + 1] = (float)env->captures[1];
}

static void go_reset(Go* env) {
    env->tick = 0;
    env->game_over = 0;
    env->reward = env->episode_return = env->score = 0;
    env->captures[0] = env->captures[1] = 0;
    for (int i = 0; i < env->cells; i++) {
        env->board[i] = env->previous[i] = env->temp[i] = 0;
        env->groups.parent[i] = (int16_t)i;
        env->groups.rank[i] = env->groups.liberties[i] = 0;
    }
    env->rewards[0] = 0;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    go_observe(env);
}

/* Distinct empty points next to the group of `root` on the trial board. */
static int go_count_liberties(Go* env, int root) {
    go_new_search(env);
    int front = 0, rear = 0, liberties = 0, nb[4];
    env->queue[rear++] = (int16_t)root;
    env->visited[root] = env->stamp;
    int colour = env->temp[root];
    while (front < rear) {
        int p = env->queue[front++];
        for (int k = 0, m = go_neighbours(env, p, nb); k < m; k++) {
            int q = nb[k];
            if (env->visited[q] == env->stamp) continue;
            if (env->temp[q] == 0) {
                liberties++;
                env->visited[q] = env->stamp;
            } else if (env->temp[q] == colour) {
                env->queue[rear++] = (int16_t)q;
                env->visited[q] = env->stamp;
            }
        }
    }
    return liberties;
}

static int go_listed(const int16_t* list, int count, int value) {
    for (int i = 0; i < count; i++)
        if (list[i] == value) return 1;
    return 0;
}

/* Take the group of `root` off the trial board; the capturing side counts (and is rewarded for)
 * every stone, and its groups next to them join the affected list. */
static void go_capture(Go* env, int root, int* affected_count) {
    go_new_search(env);
    int front = 0, rear = 0, nb[4];
    int captured = env->temp[root], capturing = 3 - captured;
    env->queue[rear++] = (int16_t)root;
    env->visited[root] = env->stamp;
    while (front != rear) {
        int p = env->queue[front++];
        env->temp[p] = 0;
        env->captures[capturing - 1]++;
        env->reward += capturing == 1 ? env->r_player_capture : env->r_opponent_capture;
        for (int k = 0, m = go_neighbours(env, p, nb); k < m; k++) {
            int q = nb[k];
            if (env->temp[q] == captured && env->visited[q] != env->stamp) {
                env->visited[q] = env->stamp;
                env->queue[rear++] = (int16_t)q;
            } else if (env->temp[q] == capturing) {
                int r = go_find(&env->temp_groups, q);
                if (!go_listed(env->affected, *affected_count, r)) env->affected[(*affected_count)++] = (int16_t)r;
            }
        }
    }
}

/* Play `player` at p if legal (empty, not suicide, and, after a capture, not back to the board
 * before the agent's last move); commits and returns 1, else leaves the board and returns 0. */
static int go_play(Go* env, int p, int player) {
    if (env->board[p] != 0) return 0;
    int c = env->cells, nb[4];
    memcpy(env->temp, env->board, (size_t)c);
    memcpy(env->temp_groups.parent, env->groups.parent, sizeof(int16_t) * (size_t)c);
    memcpy(env->temp_groups.rank, env->groups.rank, sizeof(int16_t) * (size_t)c);
    memcpy(env->temp_groups.liberties, env->groups.liberties, sizeof(int16_t) * (size_t)c);
    GoGroups* g = &env->temp_groups;
    env->temp[p] = (int8_t)player;
    g->parent[p] = (int16_t)p;
    g->rank[p] = 0;
    g->liberties[p] = 0;
    int count = 0;
    env->affected[count++] = (int16_t)p;
    for (int k = 0, m = go_neighbours(env, p, nb); k < m; k++) {
        int q = nb[k];
        if (env->temp[q] == player) {
            go_union(g, p, q);
            env->affected[count++] = (int16_t)q;
        } else if (env->temp[q] == 3 - player) {
            env->affected[count++] = (int16_t)q;
        }
    }
    for (int i = 0; i < count; i++) {
        int r = go_find(g, env->affected[i]);
        g->liberties[r] = (int16_t)go_count_liberties(env, r);
    }
    int captured = 0;
    for (int i = 0; i < count; i++) { /* count grows as captures add the capturer's groups */
        int r = go_find(g, env->affected[i]);
        if (env->temp[r] == 3 - player && g->liberties[r] == 0) {
            go_capture(env, r, &count);
            captured = 1;
        }
    }
    if (captured) {
        for (int i = 0; i < count; i++) {
            int r = go_find(g, env->affected[i]);
            g->liberties[r] = (int16_t)go_count_liberties(env, r);
        }
        if (memcmp(env->temp, env->previous, (size_t)c) == 0) return 0; /* ko */
    }
    if (g->liberties[go_find(g, p)] == 0) return 0; /* suicide */
    memcpy(env->board, env->temp, (size_t)c);
    memcpy(&env->groups.parent, g->parent, sizeof(int16_t) * (size_t)c);
    memcpy(&env->groups.rank, g->rank, sizeof(int16_t) * (size_t)c);
    memcpy(&env->groups.liberties, g->liberties, sizeof(int16_t) * (size_t)c);
    return 1;
}

/* The first empty point the breadth-first search of root's group meets, or -1. */
static int go_first_liberty(Go* env, int root) {
    go_new_search(env);
    int front = 0, rear = 0, nb[4];
    env->queue[rear++] = (int16_t)root;
    env->visited[root] = env->stamp;
    while (front < rear) {
        int p = env->queue[front++];
        for (int k = 0, m = go_neighbours(env, p, nb); k < m; k++) {
            int q = nb[k];
            if (env->board[q] == 0) return q;
            if (env->board[q] == env->board[root] && env->visited[q] != env->stamp) {
                env->visited[q] = env->stamp;
                env->queue[rear++] = (int16_t)q;
            }
        }
    }
    return -1;
}

/* A random legal point (a shuffle of the empty points, tried in turn); none ends the game. */
static void go_random_move(Go* env) {
    int count = 0;
    for (int i = 0; i < env->cells; i++)
        if (env->board[i] == 0) env->order[count++] = (int16_t)i;
    for (int i = count - 1; i > 0; i--) {
        int j = (int)rng_below(&env->rng, (uint32_t)(i + 1));
        int16_t t = env->order[i];
        env->order[i] = env->order[j];
        env->order[j] = t;
    }
    for (int i = 0; i < count; i++)
        if (go_play(env, env->order[i], 2)) return;
    env->game_over = 1;
}

static void go_opponent(Go* env) {
    int counts[4] = {0, 0, 0, 0};
    for (int i = 0; i < env->cells; i++) {
        int colour = env->board[i];
        if (colour == 0) continue;
        int r = go_find(&env->groups, i), libs = env->groups.liberties[r];
        if ((colour == 1 && libs >= 1 && libs <= 4) || (colour == 2 && libs == 1))
            env->targets[libs - 1][counts[libs - 1]++] = (int16_t)go_first_liberty(env, r);
    }
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < counts[k]; i++)
            if (env->targets[k][i] >= 0 && go_play(env, env->targets[k][i], 2)) return;
    go_random_move(env);
}

/* Tromp-Taylor area with PufferLib's neutral rule, minus komi. */
static float go_area_score(Go* env) {
    int black = 0, white = 0, nb[4];
    for (int i = 0; i < env->cells; i++) {
        black += env->board[i] == 1;
        white += env->board[i] == 2;
    }
    go_new_search(env);
    for (int start = 0; start < env->cells; start++) {
        if (env->board[start] != 0 || env->visited[start] == env->stamp) continue;
        int front = 0, rear = 0, size = 0, border = 0; /* 0 none yet, 1 black, 2 white, 3 neutral */
        env->queue[rear++] = (int16_t)start;
        env->visited[start] = env->stamp;
        while (front < rear) {
            int p = env->queue[front++];
            size++;
            for (int k = 0, m = go_neighbours(env, p, nb); k < m; k++) {
                int q = nb[k], colour = env->board[q];
                if (colour == 0 && env->visited[q] != env->stamp) {
                    env->queue[rear++] = (int16_t)q;
                    env->visited[q] = env->stamp;
                } else if (border == 0) {
                    border = colour;
                } else if (border != colour) {
                    border = 3; /* PufferLib: a visited empty point counts as a different colour */
                }
            }
        }
        if (border == 1) black += size;
        if (border == 2) white += size;
    }
    return (float)black - (float)white - env->komi;
}

static void go_step(Go* env) {
    int action = env->actions[0];
    env->tick++;
    env->reward = 0;
    int done = 0;
    if (env->tick > env->max_ticks) {
        done = 1;
    } else if (action == 0) {
        env->reward = env->r_pass;
        go_opponent(env);
        done = env->game_over;
    } else {
        memcpy(env->previous, env->board, (size_t)env->cells);
        if (go_play(env, action - 1, 1)) {
            env->reward = env->r_valid; /* PufferLib overwrites the capture reward here */
            go_opponent(env);
        } else {
            env->reward = env->r_invalid;
        }
        if (env->reward > 1) env->reward = 1;
        if (env->reward < -1) env->reward = -1;
        done = env->game_over;
    }
    if (done) {
        env->score = go_area_score(env);
        env->reward = env->score > 0 ? 1.0f : (env->score < 0 ? -1.0f : 0.0f);
    }
    env->episode_return += env->reward;
    if (done) {
        OCEAN_LOG_EPISODE(env->log, env->score > 0 ? 1.0f : 0.0f, env->score, env->episode_return, (float)env->tick);
    }
    OCEAN_END_STEP(env, done, 0, env->reward, go_reset, go_observe);
    if (!env->terminal_at_game_end) env->terminals[0] = 0;
}

static void go_render(Go* env, uint8_t* rgb) {
    int n = env->n, w = n * 12;
    fill_rect(rgb, w, w, 0, 0, w, w, 200, 160, 90);
    for (int i = 0; i < n; i++) {
        fill_rect(rgb, w, w, 6, i * 12 + 6, w - 12, 1, 60, 40, 20);
        fill_rect(rgb, w, w, i * 12 + 6, 6, 1, w - 12, 60, 40, 20);
    }
    for (int p = 0; p < env->cells; p++) {
        if (!env->board[p]) continue;
        uint8_t v = env->board[p] == 1 ? 20 : 235;
        fill_rect(rgb, w, w, (p % n) * 12 + 2, (p / n) * 12 + 2, 9, 9, v, v, v);
    }
}

static void go_render_text(Go* env, char* text) {
    for (int p = 0; p < env->cells; p++) text[p] = env->board[p] == 1 ? 'X' : (env->board[p] == 2 ? 'O' : '+');
}

static void go_close(Go* env) { (void)env; }

OCEAN_ENV(go, Go, GoLog, "perf", "score", "episode_return", "episode_length", "n")
