// ral_allocator.cpp -- a c10::DeviceAllocator for PrivateUse1 that reports the runtime's
// MemoryPool, so torch.accelerator.memory_stats()/memory_allocated()/empty_cache()/
// reset_peak_memory_stats() work on ral devices as on CUDA (without one, PyTorch fails an
// internal assert: "Allocator for privateuseone is not a DeviceAllocator").
//
// RalTensors own their memory through the runtime (torch_fl/device/memory.py), never through
// a c10 allocator, so allocate() refuses with a clear error. Built apart from the device guard
// (guard/__init__.py `load_allocator`): DeviceAllocator's interface moves between torch
// releases, and a build failure here must cost only these statistics, never the guard.
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>

#include "ral_runtime.h"

namespace {

// The runtime entry points this file calls, handed over by ral_allocator_install (the
// runtime is a separately loaded library: no link-time dependency).
struct StatsCalls {
  int (*memory_stats_get)(int32_t, rt_memory_stats*);
  int (*reset_peak_stats)(int32_t);
  int (*empty_cache)(int32_t);
  int (*device_count)(void);
  const char* (*last_error)(void);
  int (*device_get)(int32_t, rt_device_record*);
};

StatsCalls calls;

void check(int status, const char* what, c10::DeviceIndex d) {
  TORCH_CHECK(status == 0, "torch_fl: ", what, " on ral:", static_cast<int>(d), " failed: ", calls.last_error());
}

void fill(c10::CachingAllocator::StatArray& stat, uint64_t current, uint64_t peak, uint64_t allocated,
          uint64_t freed) {
  auto& s = stat[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  s.current = static_cast<int64_t>(current);
  s.peak = static_cast<int64_t>(peak);
  s.allocated = static_cast<int64_t>(allocated);
  s.freed = static_cast<int64_t>(freed);
}

class RalDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(nbytes == 0, "torch_fl: ral memory is allocated by torch_fl's runtime for ral tensors; a c10 "
                             "storage of ", nbytes, " bytes on a ral device is not supported");
    return {nullptr, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(count == 0, "torch_fl: copies of ral memory go through torch_fl's runtime");
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (int d = 0; d < calls.device_count(); d++) check(calls.empty_cache(d), "empty_cache", d);
  }
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // No DataPtr ever comes from this allocator (allocate refuses): nothing to record.
    // Tensor.record_stream on a RalTensor reaches the runtime through torch_fl instead.
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex d) override {
    rt_memory_stats st{};
    check(calls.memory_stats_get(d, &st), "memory_stats", d);
    c10::CachingDeviceAllocator::DeviceStats out;
    fill(out.allocated_bytes, st.allocated_bytes, st.peak_allocated_bytes, 0, 0);
    fill(out.requested_bytes, st.allocated_bytes, st.peak_allocated_bytes, 0, 0);
    fill(out.reserved_bytes, st.reserved_bytes, st.peak_reserved_bytes, 0, 0);
    // the pool counts live blocks but keeps no peak of them: peak reads as current
    fill(out.allocation, st.num_live_blocks, st.num_live_blocks, st.num_allocs, st.num_frees);
    fill(out.segment, st.num_live_blocks + st.num_cached_blocks, st.num_live_blocks + st.num_cached_blocks,
         st.num_plugin_mallocs, st.num_plugin_frees);
    out.num_ooms = static_cast<int64_t>(st.num_ooms);
    out.num_device_alloc = static_cast<int64_t>(st.num_plugin_mallocs);
    out.num_device_free = static_cast<int64_t>(st.num_plugin_frees);
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex d) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_fl: ral:", static_cast<int>(d),
                                " keeps its allocation counters for the process; reset_peak_memory_stats is supported");
  }
  void resetPeakStats(c10::DeviceIndex d) override { check(calls.reset_peak_stats(d), "reset_peak_stats", d); }
  // (free, total) as torch.ral.mem_get_info computes it (device/module.py): total is the
  // device's memory, or the pool's limit when smaller; free is what the pool has not reserved.
  // No `override`: releases before DeviceAllocator had it still build this file.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex d) {
    rt_memory_stats st{};
    rt_device_record rec{};
    check(calls.memory_stats_get(d, &st), "memory_stats", d);
    check(calls.device_get(d, &rec), "device_get", d);
    uint64_t total = rec.info.total_memory;
    if (st.limit_bytes && (!total || st.limit_bytes < total)) total = st.limit_bytes;
    uint64_t free = total > st.reserved_bytes ? total - st.reserved_bytes : 0;
    return {static_cast<size_t>(free), static_cast<size_t>(total)};
  }
};

RalDeviceAllocator allocator;
std::atomic<bool> installed{false};

}  // namespace

// Register the allocator for PrivateUse1 once; 0 on success.
extern "C" int ral_allocator_install(const StatsCalls* rt) {
  if (installed.exchange(true)) return 0;
  calls = *rt;
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
  return 0;
}
