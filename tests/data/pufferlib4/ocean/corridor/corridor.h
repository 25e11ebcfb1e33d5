/* corridor: a test env written here in PufferLib 4.0's env format (not PufferLib's code). Each agent
 * walks a corridor of `length` cells from a random start to the right end. Two action heads: a
 * direction (0 stay, 1 left, 2 right) and a stride (0: one cell, 1: two). Reaching the end pays +1
 * and ends the agent's episode; every other step costs 0.01; `max_steps` steps end it unfinished.
 * Observations are bytes: the agent's cell, one-hot over 16. */
#include <stdlib.h>
#include <string.h>

#include "raylib_free.h"

#define CORRIDOR_CELLS 16

typedef struct {
    float perf;
    float score;
    float episode_return;
    float episode_length;
    float strides;
    float n;
} Log;

typedef struct {
    Log log;
    unsigned char* observations;
    float* actions;
    float* rewards;
    float* terminals;
    int num_agents;
    int length;
    int max_steps;
    int pos[8];
    int tick[8];
    float ret[8];
    int strides[8];
    int* shared; /* set by a test's my_vec_init: state shared by every env */
    unsigned int rng;
} Corridor;

static void observe(Corridor* env, int a) {
    unsigned char* obs = env->observations + a * CORRIDOR_CELLS;
    memset(obs, 0, CORRIDOR_CELLS);
    obs[env->pos[a]] = 1;
}

static void reset_agent(Corridor* env, int a) {
    env->pos[a] = rand_r(&env->rng) % (env->length - 1);
    env->tick[a] = 0;
    env->ret[a] = 0.0f;
    env->strides[a] = 0;
    observe(env, a);
}

void c_reset(Corridor* env) {
    for (int a = 0; a < env->num_agents; a++) reset_agent(env, a);
}

void c_step(Corridor* env) {
    for (int a = 0; a < env->num_agents; a++) {
        int direction = (int)env->actions[2 * a];
        int stride = (int)env->actions[2 * a + 1] + 1;
        int move = direction == 1 ? -stride : direction == 2 ? stride : 0;
        env->strides[a] += stride == 2;
        env->pos[a] += move;
        if (env->pos[a] < 0) env->pos[a] = 0;
        env->tick[a]++;
        float reward = -0.01f;
        int done = 0, reached = 0;
        if (env->pos[a] >= env->length - 1) {
            reward = 1.0f;
            done = reached = 1;
        } else if (env->tick[a] >= env->max_steps) {
            done = 1;
        }
        env->ret[a] += reward;
        env->rewards[a] = reward;
        if (done) {
            env->terminals[a] = 1.0f;
            env->log.perf += reached;
            env->log.score += reached;
            env->log.episode_return += env->ret[a];
            env->log.episode_length += env->tick[a];
            env->log.strides += env->strides[a];
            env->log.n += 1;
            reset_agent(env, a);
        } else {
            observe(env, a);
        }
    }
}

void c_render(Corridor* env) { (void)env; }

void c_close(Corridor* env) { (void)env; }
