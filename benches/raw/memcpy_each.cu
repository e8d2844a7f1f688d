// The natural loop in raw CUDA C++: N buffers of SIZE bytes up from pinned memory into one device arena
// and back, one cudaMemcpyAsync per buffer, dealt round-robin to STREAMS streams; the wall time from the
// first call to the streams' end, the median of ROUNDS rounds after one to warm up. What `small_copies`
// holds its "memcpy each" ways against, built and run in the same call on the GPU machine:
//
//     nvcc -O3 -o memcpy_each benches/raw/memcpy_each.cu && ./memcpy_each 1000 4096 4 21
//
// prints one line: `raw C++ memcpy each: 1000 x 4096 B, 4 streams: median 1234.5 us (min 1200.1, max 1300.2)`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                                       \
    do {                                                                                               \
        cudaError_t check_ = (x);                                                                      \
        if (check_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(check_));                               \
            return 1;                                                                                  \
        }                                                                                              \
    } while (0)

int main(int argc, char** argv) {
    size_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 1000;
    size_t size = argc > 2 ? strtoull(argv[2], 0, 10) : 4096;
    int k = argc > 3 ? atoi(argv[3]) : 1;
    int rounds = argc > 4 ? atoi(argv[4]) : 21;
    unsigned char *up, *down, *arena;
    CHECK(cudaMallocHost(&up, n * size));
    CHECK(cudaMallocHost(&down, n * size));
    CHECK(cudaMalloc(&arena, n * size));
    for (size_t i = 0; i < n * size; i++) up[i] = (unsigned char)(i * 7 + i / size);
    std::vector<cudaStream_t> streams(k);
    for (auto& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<double> us;
    for (int r = 0; r <= rounds; r++) {
        memset(down, 0, n * size);
        auto t = std::chrono::steady_clock::now();
        for (size_t i = 0; i < n; i++)
            CHECK(cudaMemcpyAsync(arena + i * size, up + i * size, size, cudaMemcpyHostToDevice, streams[i % k]));
        if (k > 1) { // every stream waits for every other's uploads, as the lesson's barrier does
            std::vector<cudaEvent_t> ev(k);
            for (int j = 0; j < k; j++) {
                CHECK(cudaEventCreateWithFlags(&ev[j], cudaEventDisableTiming));
                CHECK(cudaEventRecord(ev[j], streams[j]));
            }
            for (int j = 0; j < k; j++)
                for (int m = 0; m < k; m++)
                    if (m != j) CHECK(cudaStreamWaitEvent(streams[j], ev[m], 0));
            for (auto e : ev) CHECK(cudaEventDestroy(e));
        }
        for (size_t i = 0; i < n; i++)
            CHECK(cudaMemcpyAsync(down + i * size, arena + i * size, size, cudaMemcpyDeviceToHost, streams[i % k]));
        for (auto s : streams) CHECK(cudaStreamSynchronize(s));
        double dt = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
        if (memcmp(up, down, n * size) != 0) {
            fprintf(stderr, "round %d: the bytes back differ\n", r);
            return 1;
        }
        if (r > 0) us.push_back(dt);
    }
    std::sort(us.begin(), us.end());
    printf("raw C++ memcpy each: %zu x %zu B, %d stream%s: median %.1f us (min %.1f, max %.1f)\n", n, size, k,
           k == 1 ? "" : "s", us[us.size() / 2], us.front(), us.back());
    return 0;
}
