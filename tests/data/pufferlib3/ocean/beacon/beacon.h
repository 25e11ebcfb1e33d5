/* beacon: a test env written here in PufferLib 3.0's env format (not PufferLib's code). Each of an
 * env's `num_agents` agents walks a line of `width` cells towards a beacon at the right end: action 0
 * stays, 1 steps left, 2 steps right. Reaching the beacon pays +1 and ends the agent's episode; every
 * other step costs 0.01; `max_steps` steps end it unfinished. An agent observes its cell, one-hot over
 * the `width` cells (floats), so the observation size is a kwarg's: its spaces file says so. Actions
 * are int32 and terminals bytes, as the 3.0 format has them. */
#include <stdlib.h>
#include <string.h>

#define BEACON_MAX_AGENTS 8

typedef struct {
    float perf;
    float score;
    float episode_return;
    float episode_length;
    float n;
} Log;

typedef struct {
    Log log;
    float* observations;
    int* actions;
    float* rewards;
    unsigned char* terminals;
    int num_agents;
    int width;
    int max_steps;
    int pos[BEACON_MAX_AGENTS];
    int tick[BEACON_MAX_AGENTS];
    float ret[BEACON_MAX_AGENTS];
} Beacon;

static void observe(Beacon* env, int a) {
    float* obs = env->observations + a * env->width;
    memset(obs, 0, env->width * sizeof(float));
    obs[env->pos[a]] = 1.0f;
}

static void reset_agent(Beacon* env, int a) {
    env->pos[a] = rand() % (env->width - 1);
    env->tick[a] = 0;
    env->ret[a] = 0.0f;
    observe(env, a);
}

void c_reset(Beacon* env) {
    for (int a = 0; a < env->num_agents; a++) reset_agent(env, a);
}

void c_step(Beacon* env) {
    for (int a = 0; a < env->num_agents; a++) {
        int move = env->actions[a] == 2 ? 1 : env->actions[a] == 1 ? -1 : 0;
        int pos = env->pos[a] + move;
        env->pos[a] = pos < 0 ? 0 : pos;
        env->tick[a]++;
        env->terminals[a] = 0;
        if (env->pos[a] >= env->width - 1) {
            env->rewards[a] = 1.0f;
            env->terminals[a] = 1;
        } else {
            env->rewards[a] = -0.01f;
            env->terminals[a] = env->tick[a] >= env->max_steps;
        }
        env->ret[a] += env->rewards[a];
        if (env->terminals[a]) {
            int won = env->pos[a] >= env->width - 1;
            env->log.perf += won;
            env->log.score += won;
            env->log.episode_return += env->ret[a];
            env->log.episode_length += env->tick[a];
            env->log.n += 1;
            reset_agent(env, a);
        } else {
            observe(env, a);
        }
    }
}

void c_render(Beacon* env) { (void)env; }

void c_close(Beacon* env) { (void)env; }
