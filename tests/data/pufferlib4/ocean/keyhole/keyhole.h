/* keyhole: a test env written here in PufferLib 4.0's env format (not PufferLib's code), with an
 * action mask (MY_ACTION_MASK). Each step every agent may take only some of its 6 actions: a random
 * nonempty subset, which the env writes into its action mask (1 allowed, 0 not). One allowed action
 * is the key, shown in the observation (one-hot over 6 floats). The key pays +1; another allowed
 * action 0; a forbidden action -1, counted in the log's `forbidden`. An episode is `max_steps`
 * steps. A policy that keeps to the mask never takes a forbidden action, trained or not. */
#include <stdlib.h>
#include <string.h>

#define KEYHOLE_ACTIONS 6

typedef struct {
    float perf;
    float score;
    float episode_return;
    float episode_length;
    float forbidden;
    float n;
} Log;

typedef struct {
    Log log;
    float* observations;
    float* actions;
    float* rewards;
    float* terminals;
    unsigned char* action_mask;
    int num_agents;
    int max_steps;
    int key[4];
    int tick[4];
    float ret[4];
    int hits[4];
    int forbidden[4];
    unsigned int rng;
} Keyhole;

static void deal(Keyhole* env, int a) {
    unsigned char* mask = env->action_mask + a * KEYHOLE_ACTIONS;
    int allowed[KEYHOLE_ACTIONS], count = 0;
    for (int i = 0; i < KEYHOLE_ACTIONS; i++) {
        mask[i] = rand_r(&env->rng) % 2;
        if (mask[i]) allowed[count++] = i;
    }
    if (count == 0) {
        int i = rand_r(&env->rng) % KEYHOLE_ACTIONS;
        mask[i] = 1;
        allowed[count++] = i;
    }
    env->key[a] = allowed[rand_r(&env->rng) % count];
    float* obs = env->observations + a * KEYHOLE_ACTIONS;
    memset(obs, 0, KEYHOLE_ACTIONS * sizeof(float));
    obs[env->key[a]] = 1.0f;
}

static void reset_agent(Keyhole* env, int a) {
    env->tick[a] = 0;
    env->ret[a] = 0.0f;
    env->hits[a] = 0;
    env->forbidden[a] = 0;
    deal(env, a);
}

void c_reset(Keyhole* env) {
    for (int a = 0; a < env->num_agents; a++) reset_agent(env, a);
}

void c_step(Keyhole* env) {
    for (int a = 0; a < env->num_agents; a++) {
        int action = (int)env->actions[a];
        float reward = 0.0f;
        if (!env->action_mask[a * KEYHOLE_ACTIONS + action]) {
            reward = -1.0f;
            env->forbidden[a]++;
        } else if (action == env->key[a]) {
            reward = 1.0f;
            env->hits[a]++;
        }
        env->rewards[a] = reward;
        env->ret[a] += reward;
        env->tick[a]++;
        if (env->tick[a] >= env->max_steps) {
            env->terminals[a] = 1.0f;
            env->log.perf += (float)env->hits[a] / env->tick[a];
            env->log.score += env->hits[a];
            env->log.episode_return += env->ret[a];
            env->log.episode_length += env->tick[a];
            env->log.forbidden += env->forbidden[a];
            env->log.n += 1;
            reset_agent(env, a);
        } else {
            deal(env, a);
        }
    }
}

void c_render(Keyhole* env) { (void)env; }

void c_close(Keyhole* env) { (void)env; }
