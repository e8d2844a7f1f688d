// Kernels of the small-copies lesson: many small buffers moved between one packed buffer (or host
// memory mapped for the GPU) and a device arena, by one launch each way.
//
// table[3 * e .. 3 * e + 3) = (offset in `packed`, offset in `arena`, bytes) of buffer e. An entry that
// does not fit inside both buffers is skipped, so no table makes a kernel touch memory outside them.
// blockIdx.y (striding by gridDim.y) picks an entry, blockIdx.x and the threads share its bytes:
// 16 bytes a load where both ends and the length are 16-byte aligned, one byte a load otherwise.

__device__ __forceinline__ bool fits(unsigned long long offset, unsigned long long bytes, unsigned long long len) {
    return bytes <= len && offset <= len - bytes;
}

__device__ __forceinline__ void copy_entry(const unsigned char* from, unsigned char* to, unsigned long long bytes) {
    unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    if ((((unsigned long long)from | (unsigned long long)to | bytes) & 15) == 0) {
        const uint4* f = (const uint4*)from;
        uint4* d = (uint4*)to;
        for (unsigned long long i = t; i < bytes / 16; i += stride) {
            d[i] = f[i];
        }
    } else {
        for (unsigned long long i = t; i < bytes; i += stride) {
            to[i] = from[i];
        }
    }
}

// Each buffer from its place in `packed` to its place in `arena`.
extern "C" __global__ void scatter(const unsigned char* packed, unsigned long long packed_len,
                                   const unsigned long long* table, unsigned int count, unsigned char* arena,
                                   unsigned long long arena_len) {
    for (unsigned int e = blockIdx.y; e < count; e += gridDim.y) {
        unsigned long long at = table[3 * e], to = table[3 * e + 1], bytes = table[3 * e + 2];
        if (fits(at, bytes, packed_len) && fits(to, bytes, arena_len)) {
            copy_entry(packed + at, arena + to, bytes);
        }
    }
}

// Each buffer from its place in `arena` back to its place in `packed`.
extern "C" __global__ void gather(const unsigned char* arena, unsigned long long arena_len,
                                  const unsigned long long* table, unsigned int count, unsigned char* packed,
                                  unsigned long long packed_len) {
    for (unsigned int e = blockIdx.y; e < count; e += gridDim.y) {
        unsigned long long at = table[3 * e], from = table[3 * e + 1], bytes = table[3 * e + 2];
        if (fits(at, bytes, packed_len) && fits(from, bytes, arena_len)) {
            copy_entry(arena + from, packed + at, bytes);
        }
    }
}
