/* pufferlib4_vecenv_sps.c: PufferLib 4.0's own CPU vector (its src/vecenv.h, OpenMP over c_step)
 * timed on one env with uniform random actions, the measurement `puffer-bench envs sps` makes of the
 * same env code on our runtime. Linked with the env's binding.c compiled against PufferLib's own
 * vecenv.h (tools/pufferlib4_envs.py builds both and sets OMP_NUM_THREADS).
 *
 *   pufferlib4_vecenv_sps TOTAL_AGENTS SECONDS [key=value ...]   (the values: the ini's [env] keys)
 *   prints: agents=N envs=M steps=S seconds=T sps=AGENT_STEPS_PER_SECOND
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vecenv.h"

/* The CUDA entry points its vecenv.h names for GPU vectors; a CPU vector (gpu = 0) calls none. */
typedef int cudaError_t;
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int f) { (void)p; (void)n; (void)f; return 1; }
cudaError_t cudaMalloc(void** p, size_t n) { (void)p; (void)n; return 1; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, int k) { (void)d; (void)s; (void)n; (void)k; return 1; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, int k, cudaStream_t st) {
    (void)d; (void)s; (void)n; (void)k; (void)st; return 1;
}
cudaError_t cudaMemset(void* p, int v, size_t n) { (void)p; (void)v; (void)n; return 1; }
cudaError_t cudaFree(void* p) { (void)p; return 1; }
cudaError_t cudaFreeHost(void* p) { (void)p; return 1; }
cudaError_t cudaSetDevice(int d) { (void)d; return 1; }
cudaError_t cudaDeviceSynchronize(void) { return 1; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return 1; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int f) { (void)s; (void)f; return 1; }
cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return 1; }
const char* cudaGetErrorString(cudaError_t e) { (void)e; return "no CUDA in this harness"; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t state = 0x9E3779B97F4A7C15ULL;
static uint32_t next_u32(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (uint32_t)(state >> 32);
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOTAL_AGENTS SECONDS [key=value ...]\n", argv[0]);
        return 2;
    }
    int total_agents = atoi(argv[1]);
    double seconds = atof(argv[2]);
    Dict* env_kwargs = create_dict(argc + 4);
    for (int i = 3; i < argc; i++) {
        char* eq = strchr(argv[i], '=');
        if (!eq) continue;
        *eq = 0;
        dict_set(env_kwargs, argv[i], atof(eq + 1));
    }
    Dict* vec_kwargs = create_dict(4);
    dict_set(vec_kwargs, "total_agents", total_agents);
    dict_set(vec_kwargs, "num_buffers", 1);
    StaticVec* vec = create_static_vec(total_agents, 1, 0, vec_kwargs, env_kwargs);
    static_vec_reset(vec);
    int atns = get_num_atns();
    int* sizes = get_act_sizes();
    /* a pool of random action rows, cycled, so drawing them is not timed */
    int pool = 64;
    size_t row = (size_t)total_agents * atns;
    float* actions = malloc(sizeof(float) * row * pool);
    for (int p = 0; p < pool; p++)
        for (size_t i = 0; i < row; i++) actions[p * row + i] = (float)(next_u32() % sizes[i % atns]);
    long steps = 0;
    double start = now(), end = start;
    for (int warm = 0; warm < 20; warm++) {
        memcpy(vec->actions, actions + (warm % pool) * row, sizeof(float) * row);
        cpu_vec_step(vec);
    }
    start = now();
    while ((end = now()) - start < seconds) {
        for (int k = 0; k < 10; k++, steps++) {
            memcpy(vec->actions, actions + (steps % pool) * row, sizeof(float) * row);
            cpu_vec_step(vec);
        }
    }
    double elapsed = end - start;
    printf("agents=%d envs=%d steps=%ld seconds=%.3f sps=%.1f\n", vec->total_agents, vec->size, steps, elapsed,
           steps * (double)vec->total_agents / elapsed);
    static_vec_close(vec);
    return 0;
}
