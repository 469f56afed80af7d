// TensorPlay host emulation of the CUDA execution model, so the host C++ compiler builds the exact
// source the CUDA emitter generates and runs it over a grid on the CPU.
//
// - blockIdx/threadIdx/blockDim/gridDim are per-OS-thread globals the scheduler sets before it
//   resumes a GPU thread.
// - A kernel without barriers runs its threads one after another (plain calls).
// - A kernel with barriers runs each GPU thread of a block as a fiber (ucontext): a fiber runs
//   until it reaches `__syncthreads` (all threads of the block), a warp shuffle (all 32 lanes of
//   its warp, twice: write, then read) or its end; the scheduler releases a barrier when every
//   live thread it waits for has arrived, and reports a deadlock (divergent barriers) as an error.
// - `__shared__` variables are function-local statics of the OS thread: one copy per block, since
//   a launch runs its blocks in turn on the calling thread.
#ifndef TP_EMULATION_H
#define TP_EMULATION_H
#define TP_EMULATION 1

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
#include <vector>

using std::ceil;
using std::cos;
using std::erf;
using std::erfc;
using std::exp;
using std::expm1;
using std::fabs;
using std::floor;
using std::fma;
using std::log;
using std::log1p;
using std::pow;
using std::rint;
using std::sin;
using std::sqrt;
using std::tanh;

struct tp_dim3 {
  unsigned x, y, z;
};

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static thread_local

static thread_local tp_dim3 threadIdx = {0, 1, 1};
static thread_local tp_dim3 blockIdx = {0, 1, 1};
static thread_local tp_dim3 blockDim = {1, 1, 1};
static thread_local tp_dim3 gridDim = {1, 1, 1};

namespace tp_emu {

enum State { Run = 0, AtBlock = 1, AtWarp = 2, Done = 3 };

struct Fiber {
  ucontext_t ctx;
  State state;
  std::vector<char> stack;
};

struct Block {
  ucontext_t sched;
  std::vector<Fiber> fibers;
  unsigned cur = 0;
  const std::function<void()>* body = nullptr;
  // Shuffle slots: one 8-byte value per thread.
  std::vector<unsigned long long> slot;
};

static thread_local Block* current = nullptr;
static thread_local const char* error = nullptr;

static inline void wait(State s) {
  Block* b = current;
  if (b == nullptr) {
    error = "a barrier or warp shuffle in a kernel launched without barrier support";
    return;
  }
  Fiber& f = b->fibers[b->cur];
  f.state = s;
  swapcontext(&f.ctx, &b->sched);
}

static void fiber_entry() {
  Block* b = current;
  (*b->body)();
  b->fibers[b->cur].state = Done;
}

// Runs one block of `threads` fibers to completion; false on a deadlock.
static inline bool run_block(Block& b, unsigned threads) {
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &b.sched;
    makecontext(&f.ctx, fiber_entry, 0);
    f.state = Run;
  }
  for (;;) {
    bool ran = false;
    for (unsigned t = 0; t < threads; ++t) {
      if (b.fibers[t].state != Run) continue;
      ran = true;
      b.cur = t;
      threadIdx.x = t;
      swapcontext(&b.sched, &b.fibers[t].ctx);
    }
    bool all_done = true;
    for (unsigned t = 0; t < threads; ++t) all_done = all_done && b.fibers[t].state == Done;
    if (all_done) return true;
    bool released = false;
    // A warp waiting at a shuffle continues when all its live lanes are there.
    for (unsigned w = 0; w * 32 < threads; ++w) {
      bool all = true, any = false;
      for (unsigned t = w * 32; t < threads && t < w * 32 + 32; ++t) {
        State s = b.fibers[t].state;
        if (s == Done) continue;
        any = true;
        all = all && s == AtWarp;
      }
      if (any && all) {
        for (unsigned t = w * 32; t < threads && t < w * 32 + 32; ++t)
          if (b.fibers[t].state == AtWarp) b.fibers[t].state = Run;
        released = true;
      }
    }
    if (!released) {
      bool all = true;
      for (unsigned t = 0; t < threads; ++t) {
        State s = b.fibers[t].state;
        all = all && (s == AtBlock || s == Done);
      }
      if (all) {
        for (unsigned t = 0; t < threads; ++t)
          if (b.fibers[t].state == AtBlock) b.fibers[t].state = Run;
        released = true;
      }
    }
    if (!released && !ran) return false;
  }
}

// Runs `kernel` over a grid of `grid` blocks of `block` threads. Returns null or an error text.
static inline const char* launch(unsigned grid, unsigned block, bool barriers,
                                 const std::function<void()>& kernel) {
  error = nullptr;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  if (!barriers) {
    for (unsigned g = 0; g < grid; ++g) {
      blockIdx.x = g;
      for (unsigned t = 0; t < block; ++t) {
        threadIdx.x = t;
        kernel();
        if (error) return error;
      }
    }
    return nullptr;
  }
  if (block % 32 != 0 || block == 0 || block > 1024) return "blocks must be a multiple of 32 threads, at most 1024";
  Block b;
  b.fibers.resize(block);
  for (auto& f : b.fibers) f.stack.resize(256 * 1024);
  b.slot.resize(block);
  b.body = &kernel;
  Block* saved = current;
  current = &b;
  const char* result = nullptr;
  for (unsigned g = 0; g < grid && !result; ++g) {
    blockIdx.x = g;
    if (!run_block(b, block)) result = "deadlock: the block's threads wait at different barriers";
    if (error) result = error;
  }
  current = saved;
  return result;
}

}  // namespace tp_emu

static inline void __syncthreads() { tp_emu::wait(tp_emu::AtBlock); }

// Shuffles exchange through the block's slots: every lane writes, the warp meets, every lane
// reads its partner's value, the warp meets again (so the slots can be reused).
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  tp_emu::Block* b = tp_emu::current;
  if (b == nullptr) {
    tp_emu::error = "a warp shuffle in a kernel launched without barrier support";
    return v;
  }
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  const unsigned me = threadIdx.x;
  b->slot[me] = bits;
  tp_emu::wait(tp_emu::AtWarp);
  const unsigned partner = (me & ~31u) | ((me & 31u) ^ (unsigned)lane_mask);
  unsigned long long other = partner < blockDim.x ? b->slot[partner] : bits;
  tp_emu::wait(tp_emu::AtWarp);
  T r;
  memcpy(&r, &other, sizeof(T));
  return r;
}

#endif  // TP_EMULATION_H
