// Kernels of the zero-copy lesson. Their pointers may be device memory or mapped host memory:
// the kernel cannot tell, only the time it takes can.

// The seed's zeroCopyKernel: out = in * a.
extern "C" __global__ void scale(const float* in, float* out, unsigned long long n, float a) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = __fmul_rn(in[i], a);
    }
}

// A second pass over the same input: out += in. Over mapped memory it crosses the bus again.
extern "C" __global__ void accumulate(const float* in, float* out, unsigned long long n) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = __fadd_rn(out[i], in[i]);
    }
}

// nvbandwidth's host_device_latency_sm in indices: one thread follows `accesses` links of a chain of
// `n` (next[i] = the index of the next link, one 128-byte line further on) from link `start`, each read
// waiting for the one before, and leaves where it ended in `out[0]`. Time over `accesses` is one
// read's latency. A link outside the chain leads back to 0, so no data makes it read outside `next`.
extern "C" __global__ void chase(const unsigned int* next, unsigned int n, unsigned int start,
                                 unsigned int accesses, unsigned int* out) {
    unsigned int p = start < n ? start : 0;
    for (unsigned int i = 0; i < accesses; i++) {
        p = next[p];
        if (p >= n) p = 0;
    }
    out[0] = p;
}
