// The core crate's own kernel: the copies a scope coalesced (src/coalesce.rs), moved by one launch. Made
// into ptx/coalesce.ptx by `cargo xtask generate` (nvcc 13.0, compute_75), which the crate embeds.
//
// table[3 * e .. 3 * e + 3) = (destination, source, bytes) of entry e, device addresses both: device
// memory, or pinned host memory mapped for the GPU (the host side of a copy, or the scope's staging).
// The table itself lies in mapped staging: one thread of a block reads an entry across the bus for the
// block. Each block takes one entry at a time (striding by gridDim.x), its threads share the bytes:
// 16 bytes a load where both ends and the length are 16-byte aligned, 4 where they are 4-byte aligned,
// one byte a load otherwise. The scope cuts copies into entries of at most 64 KiB, so that a large copy
// is shared by many blocks, and no two entries of a launch touch the same bytes where one writes them.

extern "C" __global__ void coalesced_copy(const unsigned long long* table, unsigned int count) {
    __shared__ unsigned long long entry[3];
    for (unsigned int e = blockIdx.x; e < count; e += gridDim.x) {
        if (threadIdx.x < 3) {
            entry[threadIdx.x] = table[3ull * e + threadIdx.x];
        }
        __syncthreads();
        unsigned char* to = (unsigned char*)entry[0];
        const unsigned char* from = (const unsigned char*)entry[1];
        unsigned long long bytes = entry[2];
        unsigned long long all = entry[0] | entry[1] | bytes;
        __syncthreads();
        if ((all & 15) == 0) {
            const uint4* f = (const uint4*)from;
            uint4* d = (uint4*)to;
            for (unsigned long long i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
                d[i] = f[i];
            }
        } else if ((all & 3) == 0) {
            const unsigned int* f = (const unsigned int*)from;
            unsigned int* d = (unsigned int*)to;
            for (unsigned long long i = threadIdx.x; i < bytes / 4; i += blockDim.x) {
                d[i] = f[i];
            }
        } else {
            for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x) {
                to[i] = from[i];
            }
        }
    }
}
