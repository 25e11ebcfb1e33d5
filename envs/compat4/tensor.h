/* tensor.h (PufferLib 4.0 env format, our compatibility layer): the tensor type names a binding.c
 * names in OBS_TENSOR_T. Only the element type of `data` is read (it sets the observation dtype);
 * the shape array is there so env code that declares such a struct compiles. */
#ifndef PUFFER_COMPAT4_TENSOR_H
#define PUFFER_COMPAT4_TENSOR_H

#include <stdint.h>

#define PUF_MAX_DIMS 8

typedef struct { float* data; int64_t shape[PUF_MAX_DIMS]; } FloatTensor;
typedef struct { unsigned char* data; int64_t shape[PUF_MAX_DIMS]; } ByteTensor;
typedef struct { long* data; int64_t shape[PUF_MAX_DIMS]; } LongTensor;
typedef struct { int* data; int64_t shape[PUF_MAX_DIMS]; } IntTensor;

#endif
