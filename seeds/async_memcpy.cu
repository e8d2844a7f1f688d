// async_memcpy.cu - Asynchronous memory transfers
#include <stdio.h>
#include <cuda_runtime.h>

__global__ void processKernel(float* data, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = blockDim.x * gridDim.x;
    
    for (int i = tid; i < n; i += stride) {
        // Simulate heavy computation
        float val = data[i];
        for (int j = 0; j < 100; j++) {
            val = sqrtf(val * val + 1.0f);
        }
        data[i] = val;
    }
}

int main() {
    const int N = 1 << 22;  // 4M elements
    const size_t BYTES = N * sizeof(float);
    
    // MUST use pinned memory for async!
    float *h_data;
    cudaMallocHost(&h_data, BYTES);
    
    float *d_data;
    cudaMalloc(&d_data, BYTES);
    
    // Initialize
    for (int i = 0; i < N; i++) h_data[i] = 1.0f;
    
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    
    // ============================================
    // Synchronous (Blocking)
    // ============================================
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    
    cudaEventRecord(start);
    
    // These block until complete:
    cudaMemcpy(d_data, h_data, BYTES, cudaMemcpyHostToDevice);
    processKernel<<<256, 256>>>(d_data, N);
    cudaMemcpy(h_data, d_data, BYTES, cudaMemcpyDeviceToHost);
    
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float syncTime;
    cudaEventElapsedTime(&syncTime, start, stop);
    
    // ============================================
    // Asynchronous (Non-Blocking)
    // ============================================
    cudaEventRecord(start);
    
    // These return immediately to CPU:
    cudaMemcpyAsync(d_data, h_data, BYTES, 
                    cudaMemcpyHostToDevice, stream);
    processKernel<<<256, 256, 0, stream>>>(d_data, N);
    cudaMemcpyAsync(h_data, d_data, BYTES, 
                    cudaMemcpyDeviceToHost, stream);
    
    // Can do CPU work here while GPU is busy!
    
    cudaStreamSynchronize(stream);  // Wait when needed
    
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float asyncTime;
    cudaEventElapsedTime(&asyncTime, start, stop);
    
    printf("Sync time:  %.2f ms\n", syncTime);
    printf("Async time: %.2f ms\n", asyncTime);
    
    cudaStreamDestroy(stream);
    cudaFreeHost(h_data);
    cudaFree(d_data);
    
    return 0;
}
