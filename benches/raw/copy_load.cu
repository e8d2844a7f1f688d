// A steady load on the link: SIZE MiB up (H2D) on one stream and SIZE MiB down (D2H) on another, from
// pinned memory, both at once, over and over until it is stopped. What the GPU check of `cargo xtask
// compare` runs beside B's runs (`--b-beside`) to see whether each mode flags what a load moves. A lesson
// in a shell loop would load the link only part of the time (it starts, allocates and prints between
// its copies, and a run beside it meets more or less of that); this copies from about half a second
// after it starts until it is killed.
//
//     nvcc -O3 -o copy_load benches/raw/copy_load.cu && ./copy_load [SIZE_MIB, default 256]
//
// prints one line once it is copying, then nothing; SIGTERM ends it.
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                                       \
    do {                                                                                               \
        cudaError_t check_ = (x);                                                                      \
        if (check_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(check_));                               \
            return 1;                                                                                  \
        }                                                                                              \
    } while (0)

int main(int argc, char** argv) {
    size_t bytes = (argc > 1 ? strtoull(argv[1], 0, 10) : 256) << 20;
    unsigned char *up, *down, *d_up, *d_down;
    CHECK(cudaMallocHost(&up, bytes));
    CHECK(cudaMallocHost(&down, bytes));
    CHECK(cudaMalloc(&d_up, bytes));
    CHECK(cudaMalloc(&d_down, bytes));
    cudaStream_t s[2];
    for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    fprintf(stderr, "copy_load: %zu MiB each way, both at once, until stopped\n", bytes >> 20);
    for (;;) {
        CHECK(cudaMemcpyAsync(d_up, up, bytes, cudaMemcpyHostToDevice, s[0]));
        CHECK(cudaMemcpyAsync(down, d_down, bytes, cudaMemcpyDeviceToHost, s[1]));
        CHECK(cudaStreamSynchronize(s[0]));
        CHECK(cudaStreamSynchronize(s[1]));
    }
}
