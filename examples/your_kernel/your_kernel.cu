// The kernel of examples/your_kernel/main.rs: a three-point moving average, the ends clamped.
// `cargo xtask generate` makes examples/your_kernel/your_kernel.ptx of it (nvcc -ptx -arch=compute_75).
extern "C" __global__ void smooth(const float* in, float* out, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float left = in[i > 0 ? i - 1 : i];
        float right = in[i + 1 < n ? i + 1 : i];
        out[i] = (left + in[i] + right) / 3.0f;
    }
}
