// Runs CUDA kernels of cuda/*.cu on the host, for tests on machines without a GPU.
//
// Each warp of a block is an OS thread, and each of its 32 lanes a fiber of that thread: a lane
// runs until its next warp-level shuffle, vote or __syncwarp, then the next lane runs, so those
// calls are barriers among the warp's lanes at the cost of a user-space switch
// (the kernels only call them in warp-uniform code; a warp whose lanes part ways there stops
// the process with a message). Blocks run one after another, each with exactly the dynamic
// shared memory asked for. This checks the kernels' logic (indexing, bit reads, scans,
// decoding), not GPU timing. Built with g++'s sanitizers (tests/simt/sanitize.py) it also
// reports accesses out of bounds and races: the thread sanitizer sees each lane as a fiber of
// its own, and, as on a GPU, only __syncwarp orders the lanes' memory accesses.
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
struct __attribute__((aligned(16))) ulonglong2 {
    unsigned long long x, y;
};

#ifdef __SANITIZE_THREAD__
extern "C" void* __tsan_get_current_fiber();
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
// Switching lanes orders nothing (flag 1, __tsan_switch_to_fiber_no_sync): lanes are as
// concurrent for the sanitizer as threads.
#define SIMT_TSAN(...) __VA_ARGS__
#else
#define SIMT_TSAN(...)
#endif
#ifdef __SANITIZE_ADDRESS__
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack, const void** bottom,
                                                size_t* size);
#define SIMT_ASAN(...) __VA_ARGS__
#else
#define SIMT_ASAN(...)
#endif

// Asynchronous copies in flight (see copy_async16 below).
struct PendingCopy {
    void* dst;
    const void* src;
};

// A fiber's saved context, and the switch from one fiber to another. On x86-64 the switch
// pushes the callee-saved registers on the stack it leaves, saves that stack pointer, loads
// the other's and pops its registers: a few instructions, where swapcontext also saves and
// restores the signal mask, a system call at every switch (most of the harness's time went
// there). Elsewhere, or built with -DSIMT_UCONTEXT, ucontext.
#if defined(__x86_64__) && !defined(SIMT_UCONTEXT)
using SimtContext = void*;  // the stack pointer of a fiber that is not running
// Saves this fiber's stack pointer in *save, resumes the fiber whose stack pointer is *load.
// Both are read and written here alone, out of the sanitizers' sight, as swapcontext's are:
// the thread sanitizer knows which fiber runs only at the switch's ends.
extern "C" void simt_switch_context(void** save, void* const* load);
// Weak and hidden: each source file including this defines it, and the library keeps one.
asm(R"(
    .pushsection .text
    .weak simt_switch_context
    .hidden simt_switch_context
    .type simt_switch_context, @function
simt_switch_context:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq (%rsi), %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size simt_switch_context, .-simt_switch_context
    .popsection
)");
inline void simt_switch(SimtContext& save, SimtContext& load) { simt_switch_context(&save, &load); }
// Make `context` start `entry` (which never returns) on the `size` bytes at `stack`: the
// registers' slots, then `entry` for the switch's `ret`, then a return address `entry` never
// uses. `entry` starts as if called: its stack pointer 8 past a multiple of 16.
inline void simt_make_context(SimtContext& context, void* stack, size_t size, void (*entry)()) {
    auto top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t{15};
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;
    *--sp = reinterpret_cast<void*>(entry);
    for (int i = 0; i < 6; ++i) *--sp = nullptr;
    context = sp;
}
#else
using SimtContext = ucontext_t;
inline void simt_switch(SimtContext& save, SimtContext& load) { swapcontext(&save, &load); }
inline void simt_make_context(SimtContext& context, void* stack, size_t size, void (*entry)()) {
    getcontext(&context);
    context.uc_stack.ss_sp = stack;
    context.uc_stack.ss_size = size;
    context.uc_link = nullptr;  // `entry` never returns
    makecontext(&context, entry, 0);
}
#endif

// One lane: its indices, its context and stack, its asynchronous copies.
struct Lane {
    dim3 thread, block, block_dim, grid_dim;
    SimtContext context{};
    void* stack = nullptr;
    void* fiber = nullptr;  // the thread sanitizer's
    std::atomic<bool> done{false};
    std::vector<PendingCopy> open_group;
    std::vector<std::vector<PendingCopy>> groups;
};

// One warp: its thread's own context (which runs the lanes in turn) and the lanes' slots.
struct WarpSync {
    Lane lanes[32];
    SimtContext home{};
    void* home_fiber = nullptr;
    const void* home_bottom = nullptr;  // the address sanitizer's view of the thread's stack
    size_t home_size = 0;
    const std::function<void()>* kernel = nullptr;
    unsigned long long slot[32];
    char synced = 0;  // the thread sanitizer's token of __syncwarp
    char ended = 0;   // and of the lanes' ends
};
inline thread_local WarpSync* this_warp = nullptr;
// The lane running (an atomic: the warp's thread sets it between lanes, which never race on it).
inline thread_local std::atomic<Lane*> this_lane{nullptr};
inline Lane* simt_lane() { return this_lane.load(std::memory_order_relaxed); }
// The thread sanitizer's tokens of what is set up before a block's lanes start: by the launch
// (every warp), and by the warp's thread (its own lanes).
inline char simt_started = 0;
inline thread_local char simt_warp_started = 0;

#define threadIdx (simt_lane()->thread)
#define blockIdx (simt_lane()->block)
#define blockDim (simt_lane()->block_dim)
#define gridDim (simt_lane()->grid_dim)

// The dynamic shared memory of the block being run (blocks run one at a time).
inline unsigned char* simt_smem_base = nullptr;
#define IBP_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(simt_smem_base)

// A kernel's vector access of n bytes must be n-byte aligned, as on a GPU (where a misaligned
// one faults): stop the process with a message.
inline void simt_check_aligned(const void* p, unsigned n) {
    if (reinterpret_cast<uintptr_t>(p) % n != 0) {
        std::fprintf(stderr, "simt: a %u-byte access at %p is not %u-byte aligned\n", n, p, n);
        std::abort();
    }
}
#define IBP_CHECK_ALIGNED(p, n) simt_check_aligned(p, n)

// The running lane gives the warp's thread back its turn; returns when the lane's next turn
// comes, after every other lane of the warp reached the same point (or ended).
inline void simt_yield() {
    WarpSync* w = this_warp;
    Lane* me = simt_lane();
    SIMT_TSAN(__tsan_switch_to_fiber(w->home_fiber, 1));
    SIMT_ASAN(void* fake = nullptr;
              __sanitizer_start_switch_fiber(&fake, w->home_bottom, w->home_size));
    simt_switch(me->context, w->home);
    SIMT_ASAN(__sanitizer_finish_switch_fiber(fake, &w->home_bottom, &w->home_size));
}

// __syncwarp orders the lanes' memory accesses: each lane's before it happen before every
// lane's after it.
inline void __syncwarp(unsigned = 0xffffffffu) {
    SIMT_TSAN(__tsan_release(&this_warp->synced));
    simt_yield();
    SIMT_TSAN(__tsan_acquire(&this_warp->synced));
}

// A shuffle's or a vote's barrier, which on a GPU orders none of the lanes' memory accesses
// (only __syncwarp does): shared memory written by one lane and read by another with no
// __syncwarp between is reported as a race by the thread sanitizer, as compute-sanitizer's
// racecheck would.
inline void exchange_barrier() { simt_yield(); }

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

inline unsigned __reduce_add_sync(unsigned, unsigned v) {
    const int lane = threadIdx.x & 31;
    put_slot(lane, v);
    exchange_barrier();
    unsigned out = 0;
    for (int i = 0; i < 32; ++i) out += (unsigned)get_slot(i);
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
inline bool simt_copy_at_issue = false;

inline void copy_async16(void* dst, const void* src) {
    if (simt_copy_at_issue) {
        std::memcpy(dst, src, 16);
    } else {
        simt_lane()->open_group.push_back({dst, src});
    }
}
inline void copy_async_commit() {
    Lane* me = simt_lane();
    me->groups.push_back(std::move(me->open_group));
    me->open_group.clear();
}
inline void copy_async_wait_one() {
    Lane* me = simt_lane();
    while (me->groups.size() > 1) {
        for (const PendingCopy& c : me->groups.front()) std::memcpy(c.dst, c.src, 16);
        me->groups.erase(me->groups.begin());
    }
}

inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)(((((unsigned long long)hi << 32) | lo) << (shift & 31u)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned s = shift < 32u ? shift : 32u;  // clamped, as CUDA's
    return (unsigned)(((((unsigned long long)hi << 32) | lo) << s) >> 32);
}
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
    return a < b ? a : b;
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
    return a < b ? b : a;
}

// A lane's stack: room for the kernels' per-thread arrays under the sanitizers (pages are
// only committed when touched), above a guard page that faults on an overflow.
inline constexpr size_t SIMT_LANE_STACK = 256 << 10;
inline constexpr size_t SIMT_GUARD = 64 << 10;  // a page on any Linux page size

inline void* simt_new_stack() {
    void* base = mmap(nullptr, SIMT_GUARD + SIMT_LANE_STACK, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED || mprotect(base, SIMT_GUARD, PROT_NONE) != 0) {
        std::perror("simt: a lane's stack");
        std::abort();
    }
    return static_cast<unsigned char*>(base) + SIMT_GUARD;
}

inline void simt_free_stack(void* stack) {
    munmap(static_cast<unsigned char*>(stack) - SIMT_GUARD, SIMT_GUARD + SIMT_LANE_STACK);
}

// Where a lane starts: the kernel, then back to its warp's thread for good.
inline void simt_lane_main() {
    SIMT_TSAN(__tsan_acquire(&simt_started); __tsan_acquire(&simt_warp_started));
    WarpSync* w = this_warp;
    SIMT_ASAN(__sanitizer_finish_switch_fiber(nullptr, &w->home_bottom, &w->home_size));
    (*w->kernel)();
    Lane* me = simt_lane();
    SIMT_TSAN(void* home = w->home_fiber);  // read before the lane's end is released
    me->done.store(true, std::memory_order_relaxed);
    SIMT_TSAN(__tsan_release(&w->ended));  // the lane's last access to its warp's memory
    SIMT_TSAN(__tsan_switch_to_fiber(home, 1));
    SIMT_ASAN(__sanitizer_start_switch_fiber(nullptr, w->home_bottom, w->home_size));
    simt_switch(me->context, w->home);  // for good: an ended lane is not resumed
    std::abort();
}

// Runs one block's warp `w` on this thread: its lanes in turn, one turn between barriers,
// until all have ended.
inline void simt_run_warp(WarpSync& w) {
    this_warp = &w;
    SIMT_TSAN(w.home_fiber = __tsan_get_current_fiber());
    for (Lane& lane : w.lanes) {
        lane.done.store(false, std::memory_order_relaxed);
        lane.open_group.clear();  // a block starts with no copies under way
        lane.groups.clear();
        simt_make_context(lane.context, lane.stack, SIMT_LANE_STACK, simt_lane_main);
    }
    SIMT_TSAN(__tsan_release(&simt_warp_started));
    for (;;) {
        int waiting = 0, ended = 0;
        for (Lane& lane : w.lanes) {
            if (lane.done.load(std::memory_order_relaxed)) continue;
            this_lane.store(&lane, std::memory_order_relaxed);
            SIMT_TSAN(__tsan_switch_to_fiber(lane.fiber, 1));
            SIMT_ASAN(void* fake = nullptr;
                      __sanitizer_start_switch_fiber(&fake, lane.stack, SIMT_LANE_STACK));
            simt_switch(w.home, lane.context);
            SIMT_ASAN(__sanitizer_finish_switch_fiber(fake, nullptr, nullptr));
            (lane.done.load(std::memory_order_relaxed) ? ended : waiting) += 1;
        }
        this_lane.store(nullptr, std::memory_order_relaxed);
        if (waiting == 0) break;
        if (ended) {
            std::fprintf(stderr,
                         "simt: %d lanes of a warp ended while %d waited at a shuffle, vote or "
                         "__syncwarp (warp-divergent barrier)\n",
                         ended, waiting);
            std::abort();
        }
    }
    SIMT_TSAN(__tsan_acquire(&w.ended));
}

// Launch `kernel` (a callable taking no arguments, run by every thread) on `grid` blocks of
// `block` threads (a multiple of 32) with `shared` bytes of dynamic shared memory.
inline void simt_launch(unsigned grid, unsigned block, size_t shared,
                        const std::function<void()>& kernel) {
    if (block == 0 || block % 32) {
        std::fprintf(stderr, "simt: a block of %u threads is not whole warps\n", block);
        std::abort();
    }
    // Exactly the bytes asked for: an access past them is out of bounds (the address
    // sanitizer reports it, see tests/simt/sanitize.sh); none asked for, none there.
    std::vector<unsigned char> memory(shared);
    std::vector<std::unique_ptr<WarpSync>> warps;
    for (unsigned w = 0; w < block / 32; ++w) {
        warps.push_back(std::make_unique<WarpSync>());
        warps.back()->kernel = &kernel;
        for (unsigned l = 0; l < 32; ++l) {
            Lane& lane = warps.back()->lanes[l];
            lane.stack = simt_new_stack();
            SIMT_TSAN(lane.fiber = __tsan_create_fiber(0));
            lane.thread.x = w * 32 + l;
            lane.block_dim.x = block;
            lane.grid_dim.x = grid;
        }
    }
    for (unsigned b = 0; b < grid; ++b) {
        if (shared) std::memset(memory.data(), 0xAB, shared);  // garbage, as on a GPU
        simt_smem_base = memory.data();
        for (auto& w : warps)
            for (Lane& lane : w->lanes) lane.block.x = b;
        SIMT_TSAN(__tsan_release(&simt_started));
        std::vector<std::thread> threads;
        for (auto& w : warps) threads.emplace_back([&w] { simt_run_warp(*w); });
        for (auto& th : threads) th.join();
    }
    for (auto& w : warps) {
        for (Lane& lane : w->lanes) {
            SIMT_TSAN(__tsan_destroy_fiber(lane.fiber));
            simt_free_stack(lane.stack);
        }
    }
}
