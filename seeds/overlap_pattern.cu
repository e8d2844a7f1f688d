// overlap_pattern.cu - Overlapping transfers with computation
#include <stdio.h>
#include <cuda_runtime.h>

__global__ void process(float* data, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) {
        float val = data[tid];
        for (int i = 0; i < 500; i++) {
            val = sinf(val) * cosf(val) + 1.0f;
        }
        data[tid] = val;
    }
}

int main() {
    const int N = 1 << 24;  // 16M elements
    const int NUM_STREAMS = 4;
    const int CHUNK_SIZE = N / NUM_STREAMS;
    const size_t BYTES = N * sizeof(float);
    const size_t CHUNK_BYTES = CHUNK_SIZE * sizeof(float);
    
    // Pinned host memory
    float *h_input, *h_output;
    cudaMallocHost(&h_input, BYTES);
    cudaMallocHost(&h_output, BYTES);
    
    // Device memory (separate for each stream for true overlap)
    float* d_data[NUM_STREAMS];
    for (int i = 0; i < NUM_STREAMS; i++) {
        cudaMalloc(&d_data[i], CHUNK_BYTES);
    }
    
    // Create streams
    cudaStream_t streams[NUM_STREAMS];
    for (int i = 0; i < NUM_STREAMS; i++) {
        cudaStreamCreate(&streams[i]);
    }
    
    // Initialize input
    for (int i = 0; i < N; i++) h_input[i] = 1.0f;
    
    // ============================================
    // VERSION 1: No Overlap (Baseline)
    // ============================================
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    
    cudaEventRecord(start);
    
    for (int i = 0; i < NUM_STREAMS; i++) {
        int offset = i * CHUNK_SIZE;
        
        // All in default stream - sequential!
        cudaMemcpy(d_data[i], h_input + offset, CHUNK_BYTES, 
                   cudaMemcpyHostToDevice);
        process<<<(CHUNK_SIZE+255)/256, 256>>>(d_data[i], CHUNK_SIZE);
        cudaMemcpy(h_output + offset, d_data[i], CHUNK_BYTES, 
                   cudaMemcpyDeviceToHost);
    }
    
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float noOverlapTime;
    cudaEventElapsedTime(&noOverlapTime, start, stop);
    
    // ============================================
    // VERSION 2: With Overlap
    // ============================================
    cudaEventRecord(start);
    
    // Issue all operations for all streams
    for (int i = 0; i < NUM_STREAMS; i++) {
        int offset = i * CHUNK_SIZE;
        
        cudaMemcpyAsync(d_data[i], h_input + offset, CHUNK_BYTES,
                        cudaMemcpyHostToDevice, streams[i]);
        
        process<<<(CHUNK_SIZE+255)/256, 256, 0, streams[i]>>>(
            d_data[i], CHUNK_SIZE);
        
        cudaMemcpyAsync(h_output + offset, d_data[i], CHUNK_BYTES,
                        cudaMemcpyDeviceToHost, streams[i]);
    }
    
    // Synchronize all streams
    for (int i = 0; i < NUM_STREAMS; i++) {
        cudaStreamSynchronize(streams[i]);
    }
    
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float overlapTime;
    cudaEventElapsedTime(&overlapTime, start, stop);
    
    printf("Without overlap: %.2f ms\n", noOverlapTime);
    printf("With overlap:    %.2f ms\n", overlapTime);
    printf("Speedup:         %.2fx\n", noOverlapTime / overlapTime);
    
    // Cleanup
    for (int i = 0; i < NUM_STREAMS; i++) {
        cudaStreamDestroy(streams[i]);
        cudaFree(d_data[i]);
    }
    cudaFreeHost(h_input);
    cudaFreeHost(h_output);
    
    return 0;
}
