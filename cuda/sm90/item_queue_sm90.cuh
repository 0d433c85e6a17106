// item_queue_sm90.cuh: a persistent CTA's hand-over of work items from the thread that schedules
// them to the roles that run them: the sm90 forward's tiles (fwd_kernel_sm90.cuh's TileQueue; the
// backward's persistent grid used it too, a losing variant that main's history keeps at a284916). The
// scheduling thread decodes each item once, so that the readers hold none of the schedule's state
// (the forward's d64 kMods consumers spilled 8 bytes at their 160 registers with the linear index).
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "sm90/ptx_sm90.cuh"

namespace flashsdpa {
namespace sm90 {

// kSlots items of two 16-byte words in shared memory, each with a "full" mbarrier (the writer's
// arrival, release: the item is written) and an "empty" one (every reader's arrival once it has
// read it). The writers run at most an item or two ahead of the readers (their rings' stages), so
// four slots never make them wait here.
struct ItemQueue {
  static constexpr int kSlots = 4;
  static constexpr int kBytes = kSlots * (8 + 8 + 32);  // full and empty mbarriers, an item each
  uint32_t base;  // kBytes of shared memory, 16-byte aligned
  __device__ __forceinline__ uint32_t full(int s) const { return base + 8 * s; }
  __device__ __forceinline__ uint32_t empty(int s) const { return base + 8 * (kSlots + s); }
  __device__ __forceinline__ uint32_t slot(int s) const { return base + 16 * kSlots + 32 * s; }
  // One thread, before the CTA's barrier: every slot's mbarriers, `readers` arrivals to empty one.
  __device__ __forceinline__ void init(int readers) const {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), readers);
    }
  }
  // The writer: the CTA's i-th item (i counts from 0).
  __device__ __forceinline__ void push(int i, uint4 first, uint4 second) const {
    const int s = i % kSlots;
    mbar_wait(empty(s), ((i / kSlots) & 1) ^ 1);
    st_shared_v4(slot(s), first);
    st_shared_v4(slot(s) + 16, second);
    mbar_arrive(full(s));
  }
  // Every reader: the i-th item.
  __device__ __forceinline__ void pop(int i, uint4& first, uint4& second) const {
    const int s = i % kSlots;
    mbar_wait(full(s), (i / kSlots) & 1);
    first = ld_shared_v4(slot(s));
    second = ld_shared_v4(slot(s) + 16);
    mbar_arrive(empty(s));
  }
};

}  // namespace sm90
}  // namespace flashsdpa
