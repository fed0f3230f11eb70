// Runs CUDA kernels of cuda/*.cu on the host, for tests on machines without a GPU.
//
// Each lane of a warp is an OS thread; warp-level shuffles, votes and __syncwarp are barriers
// among the 32 threads of the warp (the kernels only call them in warp-uniform code).
// Blocks run one after another, each with exactly the dynamic shared memory asked for. This
// checks the kernels' logic (indexing, bit reads, scans, decoding), not GPU timing. Built
// with g++'s sanitizers (tests/simt/sanitize.py) it also reports accesses out of bounds and
// races: for the thread sanitizer, as on a GPU, only __syncwarp orders memory accesses.
#pragma once

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
    unsigned x, y;
};

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

struct WarpSync {
    std::barrier<> bar{32};
    unsigned long long slot[32];
};
inline thread_local WarpSync* this_warp = nullptr;

// The dynamic shared memory of the block being run (blocks run one at a time).
inline unsigned char* simt_smem_base = nullptr;
#define IBP_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(simt_smem_base)

inline void __syncwarp(unsigned = 0xffffffffu) { this_warp->bar.arrive_and_wait(); }

#ifdef __SANITIZE_THREAD__
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
// A shuffle's or a vote's barrier, which on a GPU orders none of the lanes' memory accesses
// (only __syncwarp does): the thread sanitizer is told to ignore it, so that shared memory
// written by one lane and read by another with no __syncwarp between is reported as a race,
// as compute-sanitizer's racecheck would.
inline void exchange_barrier() {
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    __tsan_ignore_thread_begin();  // nor the barrier's own state
    this_warp->bar.arrive_and_wait();
    __tsan_ignore_thread_end();
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
}
#else
inline void exchange_barrier() { this_warp->bar.arrive_and_wait(); }
#endif

// The lanes' values meet in the warp's slots (relaxed atomics: not synchronisation).
inline void put_slot(int lane, unsigned long long v) {
    std::atomic_ref<unsigned long long>(this_warp->slot[lane]).store(v, std::memory_order_relaxed);
}
inline unsigned long long get_slot(int lane) {
    return std::atomic_ref<unsigned long long>(this_warp->slot[lane]).load(std::memory_order_relaxed);
}

template <typename T>
inline T __shfl_up_sync(unsigned, T v, int d) {
    const int lane = threadIdx.x & 31;
    put_slot(lane, (unsigned long long)v);
    exchange_barrier();
    T out = lane >= d ? (T)get_slot(lane - d) : v;
    exchange_barrier();
    return out;
}

template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
    const int lane = threadIdx.x & 31;
    put_slot(lane, (unsigned long long)v);
    exchange_barrier();
    T out = (T)get_slot(src & 31);
    exchange_barrier();
    return out;
}

inline unsigned __ballot_sync(unsigned, int predicate) {
    const int lane = threadIdx.x & 31;
    put_slot(lane, predicate ? 1u : 0u);
    exchange_barrier();
    unsigned out = 0;
    for (int i = 0; i < 32; ++i) out |= (unsigned)get_slot(i) << i;
    exchange_barrier();
    return out;
}

inline int atomicCAS(int* address, int compare, int val) {
    std::atomic_ref<int> ref(*address);
    ref.compare_exchange_strong(compare, val);
    return compare;
}

inline long long atomicMin(long long* address, long long val) {
    std::atomic_ref<long long> ref(*address);
    long long old = ref.load();
    while (val < old && !ref.compare_exchange_weak(old, val)) {
    }
    return old;
}

// cuda/sample_neighbors.cu's accesses to map entries that other threads rewrite by design.
#define IBP_RELAXED_DEFINED
inline long long relaxed_load(const long long* p) {
    return std::atomic_ref<long long>(*const_cast<long long*>(p)).load(std::memory_order_relaxed);
}
inline void relaxed_store(long long* p, long long v) {
    std::atomic_ref<long long>(*p).store(v, std::memory_order_relaxed);
}

// Asynchronous copies (cuda/fetch_decode.cu's copy_async16 / commit / wait_one). Each lane
// keeps its committed groups; by default a copy happens only when a wait retires its group,
// so a kernel that reads a staged buffer before waiting for it reads stale bytes. With
// `simt_copy_at_issue` a copy happens at once instead, so a kernel that overwrites a buffer
// other lanes are still reading (a missing __syncwarp) can show.
#define IBP_ASYNC_COPY_DEFINED
struct PendingCopy {
    void* dst;
    const void* src;
};
inline thread_local std::vector<PendingCopy> simt_open_group;
inline thread_local std::vector<std::vector<PendingCopy>> simt_groups;
inline bool simt_copy_at_issue = false;

inline void copy_async16(void* dst, const void* src) {
    if (simt_copy_at_issue) {
        std::memcpy(dst, src, 16);
    } else {
        simt_open_group.push_back({dst, src});
    }
}
inline void copy_async_commit() {
    simt_groups.push_back(std::move(simt_open_group));
    simt_open_group.clear();
}
inline void copy_async_wait_one() {
    while (simt_groups.size() > 1) {
        for (const PendingCopy& c : simt_groups.front()) std::memcpy(c.dst, c.src, 16);
        simt_groups.erase(simt_groups.begin());
    }
}

inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
    return a < b ? a : b;
}

// Launch `kernel` (a callable taking no arguments, run by every thread) on `grid` blocks of
// `block` threads (a multiple of 32) with `shared` bytes of dynamic shared memory.
inline void simt_launch(unsigned grid, unsigned block, size_t shared,
                        const std::function<void()>& kernel) {
    // Exactly the bytes asked for: an access past them is out of bounds (the address
    // sanitizer reports it, see tests/simt/sanitize.sh); none asked for, none there.
    std::vector<unsigned char> memory(shared);
    for (unsigned b = 0; b < grid; ++b) {
        if (shared) std::memset(memory.data(), 0xAB, shared);  // garbage, as on a GPU
        simt_smem_base = memory.data();
        std::vector<std::unique_ptr<WarpSync>> warps;
        for (unsigned w = 0; w < block / 32; ++w) warps.push_back(std::make_unique<WarpSync>());
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t) {
            threads.emplace_back([&, b, t] {
                threadIdx.x = t;
                blockIdx.x = b;
                blockDim.x = block;
                gridDim.x = grid;
                this_warp = warps[t / 32].get();
                kernel();
            });
        }
        for (auto& th : threads) th.join();
    }
}
