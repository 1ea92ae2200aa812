// ZEROSIM_HOST_DEVICE marks a function that both the host compiler and nvcc compile from the
// one definition (the casts, the random bits): the CPU and the CUDA kernels then compute the
// same bits by construction, with no second copy to keep in step.
#pragma once

#if defined(__CUDACC__)
#define ZEROSIM_HOST_DEVICE __host__ __device__
#else
#define ZEROSIM_HOST_DEVICE
#endif
