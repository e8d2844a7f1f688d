/**** day43_ZeroCopyExample.cu ****/
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void zeroCopyKernel(const float *arr, float *out, int N) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        // simple operation (e.g., scaling)
        out[idx] = arr[idx] * 2.0f;
    }
}

int main() {
    int N=1<<20;
    size_t size = N*sizeof(float);

    // 1) Allocate host memory with zero-copy
    float *h_in=NULL, *h_out=NULL;
    cudaHostAlloc((void**)&h_in, size, cudaHostAllocMapped);
    cudaHostAlloc((void**)&h_out, size, cudaHostAllocMapped);

    // 2) Initialize h_in
    for(int i=0; i<N; i++){
        h_in[i] = (float)(rand()%100);
        h_out[i] = 0.0f;
    }

    // 3) Get device pointers for them
    float *d_in, *d_out;
    cudaHostGetDevicePointer((void**)&d_in, (void*)h_in, 0);
    cudaHostGetDevicePointer((void**)&d_out, (void*)h_out, 0);

    // 4) Launch kernel that directly accesses host memory
    int threads=256;
    int blocks=(N+threads-1)/threads;
    zeroCopyKernel<<<blocks, threads>>>(d_in, d_out, N);
    cudaDeviceSynchronize();

    // 5) Now h_out should contain the results (no explicit memcpy)
    printf("h_out[0]= %f\n", h_out[0]);

    // Cleanup
    cudaFreeHost(h_in);
    cudaFreeHost(h_out);
    return 0;
}
