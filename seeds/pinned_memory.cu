// pinned_memory.cu - Pinned memory allocation and transfers
#include <stdio.h>
#include <cuda_runtime.h>

int main() {
    const size_t SIZE = 1 << 26;  // 64MB
    const size_t BYTES = SIZE * sizeof(float);
    
    float *h_pageable, *h_pinned;
    float *d_data;
    
    // ============================================
    // Allocate Host Memory
    // ============================================
    
    // Regular pageable memory
    h_pageable = (float*)malloc(BYTES);
    
    // Pinned (page-locked) memory
    cudaMallocHost(&h_pinned, BYTES);  // Or cudaHostAlloc
    
    // Alternative with flags:
    // cudaHostAlloc(&h_pinned, BYTES, cudaHostAllocDefault);
    // Flags: cudaHostAllocPortable, cudaHostAllocMapped, cudaHostAllocWriteCombined
    
    cudaMalloc(&d_data, BYTES);
    
    // Initialize
    for (size_t i = 0; i < SIZE; i++) {
        h_pageable[i] = 1.0f;
        h_pinned[i] = 1.0f;
    }
    
    // ============================================
    // Compare Transfer Speeds
    // ============================================
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    float ms;
    
    // Pageable transfer (synchronous only!)
    cudaEventRecord(start);
    cudaMemcpy(d_data, h_pageable, BYTES, cudaMemcpyHostToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms, start, stop);
    printf("Pageable H2D: %.2f ms (%.2f GB/s)\n", 
           ms, BYTES / ms / 1e6);
    
    // Pinned transfer (can be async!)
    cudaEventRecord(start);
    cudaMemcpy(d_data, h_pinned, BYTES, cudaMemcpyHostToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms, start, stop);
    printf("Pinned H2D:   %.2f ms (%.2f GB/s)\n", 
           ms, BYTES / ms / 1e6);
    
    // Cleanup
    free(h_pageable);
    cudaFreeHost(h_pinned);  // Must use cudaFreeHost!
    cudaFree(d_data);
    
    return 0;
}
