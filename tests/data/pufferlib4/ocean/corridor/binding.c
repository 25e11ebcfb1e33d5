#include "corridor.h"
#define OBS_SIZE 16
#define NUM_ATNS 2
#define ACT_SIZES {3, 2}
#define OBS_TENSOR_T ByteTensor

#define Env Corridor
#include "vecenv.h"

void my_init(Env* env, Dict* kwargs) {
    env->num_agents = dict_get(kwargs, "num_agents")->value;
    env->length = dict_get(kwargs, "length")->value;
    env->max_steps = dict_get(kwargs, "max_steps")->value;
}

void my_log(Log* log, Dict* out) {
    dict_set(out, "perf", log->perf);
    dict_set(out, "score", log->score);
    dict_set(out, "episode_return", log->episode_return);
    dict_set(out, "episode_length", log->episode_length);
}
