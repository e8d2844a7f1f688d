// The seed's vectorAddKernel: C = A + B, one element per thread (grid-stride for any n).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, unsigned long long n) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        c[i] = a[i] + b[i];
    }
}
