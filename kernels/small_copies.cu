// The small-copies lesson's kernel: many small buffers moved between one packed buffer (or host memory
// mapped for the GPU) and a device arena, by one launch each way (the same kernel, its table read the
// other way back).
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

// Each buffer of the table from its place in `from` to its place in `to`, the table read one way or the
// other: with `backward` 0 an entry's first offset is in `from` and its second in `to` (the scatter:
// packed to arena), with `backward` 1 the other way round (the gather: arena back to packed).
extern "C" __global__ void copy_by_table(const unsigned char* from, unsigned long long from_len,
                                         const unsigned long long* table, unsigned int count,
                                         unsigned int backward, unsigned char* to, unsigned long long to_len) {
    unsigned int b = backward & 1;
    for (unsigned int e = blockIdx.y; e < count; e += gridDim.y) {
        const unsigned long long* entry = table + 3ull * e;
        unsigned long long at = entry[b], dest = entry[1 - b], bytes = entry[2];
        if (fits(at, bytes, from_len) && fits(dest, bytes, to_len)) {
            copy_entry(from + at, to + dest, bytes);
        }
    }
}
