// Kernels with known faults, run only by tests/test_kernels_sanitized.py: they show that the
// sanitized harness (tests/simt/sanitize.py) reports each kind of fault it is meant to find,
// so that a clean sanitized run of the real kernels means something.
#include "simt_host.h"

// A frame as large as a lane's whole stack (its own function, so that only which 6 has it).
__attribute__((noinline)) unsigned past_the_stack() {
    volatile unsigned char past[SIMT_LANE_STACK];
    past[0] = 1;  // the lowest byte: below the stack, on the guard page
    return past[0];
}

// which: 0 shared memory written by lane 0 and read by every lane after a __syncwarp (no
// fault); 1 the same with only a shuffle between (a race); 2 a read one word past the launch's
// shared memory (out of bounds); 3 a shift by 32 bits of a 32-bit word (undefined); 4 a
// 16-byte vector load from an address that is only 4-byte aligned (a GPU faults on it); 5 a
// __syncwarp that only half the lanes reach (the harness stops the process, naming it); 6 a
// lane writing past the end of its stack (a fault on the guard page, not memory overwritten).
__global__ void selfcheck_kernel(int which, unsigned* out) {
    IBP_DYNAMIC_SMEM(unsigned, smem);
    const int lane = threadIdx.x & 31;
    if (which <= 1) {
        if (lane == 0) smem[0] = 42u;
        if (which == 0) __syncwarp();
        const unsigned from0 = __shfl_sync(0xffffffffu, (unsigned)lane, 0);
        out[lane] = smem[0] + from0;
    } else if (which == 2) {
        smem[lane] = (unsigned)lane;
        __syncwarp();
        out[lane] = smem[lane + 1];
    } else if (which == 3) {
        out[lane] = 1u << (lane + 1);
    } else if (which == 5) {
        if (lane < 16) __syncwarp();
        out[lane] = 1u;
    } else if (which == 6) {
        out[lane] = past_the_stack();
    } else {
        smem[lane] = (unsigned)lane;
        __syncwarp();
        const uint4* v = reinterpret_cast<const uint4*>(smem + 1 + (lane & 3) * 4);
        out[lane] = v->x;
    }
}

// Runs `which` on one warp with 32 words of shared memory; returns the sum of its outputs.
extern "C" unsigned simt_selfcheck(int which) {
    unsigned out[32] = {};
    simt_launch(1, 32, 32 * sizeof(unsigned), [&] { selfcheck_kernel(which, out); });
    unsigned sum = 0;
    for (unsigned v : out) sum += v;
    return sum;
}
