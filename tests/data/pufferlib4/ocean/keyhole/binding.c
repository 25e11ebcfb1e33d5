#include "keyhole.h"
#define OBS_SIZE 6
#define NUM_ATNS 1
#define ACT_SIZES {6}
#define OBS_TENSOR_T FloatTensor
#define MY_ACTION_MASK 6

#define Env Keyhole
#include "vecenv.h"

void my_init(Env* env, Dict* kwargs) {
    env->num_agents = dict_get(kwargs, "num_agents")->value;
    env->max_steps = dict_get(kwargs, "max_steps")->value;
}

void my_log(Log* log, Dict* out) {
    dict_set(out, "perf", log->perf);
    dict_set(out, "score", log->score);
    dict_set(out, "episode_return", log->episode_return);
    dict_set(out, "episode_length", log->episode_length);
    dict_set(out, "forbidden", log->forbidden);
}
