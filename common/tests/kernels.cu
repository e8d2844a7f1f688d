// The kernels of common's front-page example and of its GPU tests. Made into ptx/kernels.ptx by
// `cargo xtask generate` (nvcc 13.0, compute_75), which the tests embed.

// y = a * x + y over n elements, grid-stride.
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = a * x[i] + y[i];
    }
}

// iters rounds of x = x * (1 - 2^-14) + 2^-14 in place: as long as a test needs the GPU busy.
extern "C" __global__ void busy(float* x, unsigned long long n, unsigned int iters) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        for (unsigned int k = 0; k < iters; k++) {
            v = v * (1.0f - 1.0f / 16384.0f) + 1.0f / 16384.0f;
        }
        x[i] = v;
    }
}

// Writes 1 TiB below `data`, where nothing is mapped: the GPU stops it and the context dies. For tests
// of error handling only.
extern "C" __global__ void fault(float* data) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        *(volatile float*)(data - (1ull << 40)) = 1.0f;
    }
}
