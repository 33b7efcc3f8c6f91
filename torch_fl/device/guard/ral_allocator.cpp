// ral_allocator.cpp -- a c10::DeviceAllocator for PrivateUse1 that reports the runtime's
// MemoryPool, so torch.accelerator.memory_stats()/memory_allocated()/empty_cache()/
// reset_peak_memory_stats() work on ral devices as on CUDA (without one, PyTorch fails an
// internal assert: "Allocator for privateuseone is not a DeviceAllocator").
//
// It also gives ral memory c10 storages: allocate() takes a block from the MemoryPool
// (`torch.UntypedStorage(n, device="ral:N")`), and ral_storage_new wraps a block a RalTensor's
// Buffer already holds (`t.untyped_storage()`, torch_fl/device/memory.py). Either way the
// storage's DataPtr owns the block and frees it to the pool (stream-ordered) when the last
// reference goes; it needs no GIL. It registers PrivateUse1's backend-metadata hooks too
// (`torch._utils.set_tensor_metadata`/`get_tensor_metadata`).
//
// Built apart from the device guard (guard/__init__.py `load_allocator`): DeviceAllocator's
// interface moves between torch releases, and a build failure here must cost only these
// statistics and storages, never the guard.
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include <unistd.h>

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
  int (*malloc)(int32_t, uint64_t, int32_t, uint64_t*);
  int (*free)(int32_t, uint64_t);
  int (*record_stream)(int32_t, uint64_t, int32_t);
  int32_t (*current_stream)(int32_t);
  int32_t (*current_device)(void);
  int (*copy_d2d)(int32_t, uint64_t, uint64_t, int32_t, uint64_t, uint64_t, uint64_t, int32_t);
  int out_of_memory;  // RAL_ERROR_OUT_OF_MEMORY
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

// The deleter's context: which pool block to give back.
struct Block {
  int32_t device;
  uint64_t ptr;
};

pid_t owner_pid = 0;  // the process that installed the allocator (and owns the pool)

void free_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  // In a forked child the memory is the parent's and the runtime unusable (device/fork.py):
  // leave the block alone, as Buffer.__del__ does. A failure here has no one to report to.
  if (getpid() == owner_pid) calls.free(b->device, b->ptr);
  delete b;
}

c10::Device ral(int32_t d) { return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(d)); }

// A DataPtr owning pool block `ptr` of device d (none for an empty block).
c10::DataPtr owning(int32_t d, uint64_t ptr) {
  if (!ptr) return {nullptr, ral(d)};
  return {reinterpret_cast<void*>(ptr), new Block{d, ptr}, &free_block, ral(d)};
}

// A pool block of nbytes on ral:d for its current stream; a full pool or device raises
// torch.OutOfMemoryError (c10::OutOfMemoryError), as a CUDA allocation does.
uint64_t pool_malloc(int32_t d, uint64_t nbytes, const char* what) {
  uint64_t ptr = 0;
  int status = calls.malloc(d, nbytes, calls.current_stream(d), &ptr);
  TORCH_CHECK_WITH(OutOfMemoryError, status != calls.out_of_memory, "torch_fl: ral:", static_cast<int>(d),
                   " is out of memory ", what, " (", nbytes, " bytes): ", calls.last_error());
  check(status, what, d);
  return ptr;
}

class RalDeviceAllocator final : public c10::DeviceAllocator {
 public:
  // A block from the current device's MemoryPool, for use on its current stream.
  c10::DataPtr allocate(size_t nbytes) override {
    int32_t d = calls.current_device();
    if (nbytes == 0) return {nullptr, ral(d)};
    return owning(d, pool_malloc(d, nbytes, "allocating a storage"));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(count == 0, "torch_fl: copies of ral memory go through torch_fl's runtime (copy_ of a tensor "
                            "on the storage)");
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (int d = 0; d < calls.device_count(); d++) check(calls.empty_cache(d), "empty_cache", d);
  }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get()) return;
    int32_t d = ptr.device().index();
    check(calls.record_stream(d, reinterpret_cast<uint64_t>(ptr.get()), static_cast<int32_t>(stream.id())),
          "record_stream", d);
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

// Backend metadata of a ral tensor: the flags torch._utils.set_tensor_metadata gave it
// (conj/neg excepted, which PyTorch keeps as tensor bits). Cloned with the TensorImpl's
// metadata (detach, shallow copies), as PyTorch does for any backend's BackendMeta.
struct RalBackendMeta final : c10::BackendMeta {
  std::map<std::string, bool> flags;
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& ptr) const override {
    auto copy = c10::make_intrusive<RalBackendMeta>();
    copy->flags = flags;
    return copy;
  }
};

void get_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& m) {
  if (auto* meta = dynamic_cast<RalBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta())) {
    for (const auto& [k, v] : meta->flags) m[k] = v;
  }
}

}  // namespace

// Nonzero once any ral tensor was given backend metadata: Python's hot paths (detach) read it
// to skip copying metadata that no tensor has.
extern "C" int ral_backend_meta_used = 0;

namespace {

void set_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& m) {
  if (m.empty()) return;  // nothing but conj/neg: PyTorch has set those bits already
  ral_backend_meta_used = 1;
  auto meta = c10::make_intrusive<RalBackendMeta>();
  for (const auto& [k, v] : m) meta->flags[k] = v;
  t.unsafeGetTensorImpl()->set_backend_meta(meta);
}

}  // namespace

// A c10 storage (one strong reference, returned raw) owning pool block `ptr` of `nbytes` on
// ral:`device`: Python wraps it with UntypedStorage._new_with_weak_ptr, then drops this
// reference with ral_storage_decref. nullptr on failure.
extern "C" void* ral_storage_new(uint64_t ptr, uint64_t nbytes, int32_t device) {
  try {
    auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), static_cast<size_t>(nbytes),
                                                      owning(device, ptr), &allocator, /*resizable=*/true);
    return impl.release();
  } catch (...) {
    return nullptr;
  }
}

// 1 if storage `impl` owns a pool block through this file's DataPtr (it starts a block), else 0
// (a storage PyTorch made over memory it was handed, e.g. by a DLPack import).
extern "C" int ral_storage_owns_block(void* impl) {
  auto* s = static_cast<c10::StorageImpl*>(impl);
  return s->data_ptr().get_deleter() == &free_block ? 1 : 0;
}

// Storage slices (`s[a:b]`, PyTorch's THPStorage_get) are StorageImpls whose DataPtr points
// into the parent's memory, with the parent StorageImpl as context and one deleter shared by
// every slice. ral_storage_note_slice records that deleter from a slice Python made of a CPU
// storage (guard/__init__.py), so a context is read as a StorageImpl only behind it.
c10::DeleterFnPtr slice_deleter = nullptr;

extern "C" void ral_storage_note_slice(void* impl) {
  slice_deleter = static_cast<c10::StorageImpl*>(impl)->data_ptr().get_deleter();
}

// The block-owning storage that storage slice `impl` (of a slice, ...) lies in, as one strong
// reference (released with ral_storage_decref), and the slice's byte offset in it; nullptr if
// impl is no slice of a storage owning a pool block.
extern "C" void* ral_storage_slice_base(void* impl, uint64_t* offset) {
  auto* s = static_cast<c10::StorageImpl*>(impl);
  auto* data = static_cast<char*>(s->data_ptr().get());
  while (slice_deleter && s->data_ptr().get_deleter() == slice_deleter && s->data_ptr().get_context()) {
    s = static_cast<c10::StorageImpl*>(s->data_ptr().get_context());
  }
  if (s == impl || s->data_ptr().get_deleter() != &free_block) return nullptr;
  *offset = static_cast<uint64_t>(data - static_cast<char*>(s->data_ptr().get()));
  c10::raw::intrusive_ptr::incref(s);
  return s;
}

extern "C" void ral_storage_decref(void* impl) {
  c10::intrusive_ptr<c10::StorageImpl>::reclaim(static_cast<c10::StorageImpl*>(impl));
}

// Point storage `impl` (a live StorageImpl*, from UntypedStorage._cdata) at pool block `ptr`
// of `nbytes`, which it then owns; its old block goes back to the pool.
extern "C" int ral_storage_reset(void* impl, uint64_t ptr, uint64_t nbytes, int32_t device) {
  try {
    auto* s = static_cast<c10::StorageImpl*>(impl);
    s->set_data_ptr_noswap(owning(device, ptr));
    s->set_nbytes(static_cast<size_t>(nbytes));
    return 0;
  } catch (...) {
    return 1;
  }
}

// UntypedStorage.resize_ of a ral storage (PrivateUse1HooksInterface::resizePrivateUse1Bytes,
// forwarded by ral_guard.cpp): a fresh pool block on the storage's device, the first
// min(old, new) bytes copied over on the current stream, the old block freed stream-ordered,
// as CUDA's resize_bytes_cuda does. 0 bytes frees the block. An allocation that fails raises
// before anything changes.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  auto* s = storage.unsafeGetStorageImpl();
  TORCH_CHECK(s->resizable(), "Trying to resize storage that is not resizable");
  int32_t d = s->device().index();
  TORCH_CHECK(s->data_ptr().get_deleter() == &free_block || !s->data_ptr().get(),
              "torch_fl: this ral:", static_cast<int>(d), " storage holds memory torch_fl did not allocate (a DLPack "
              "import): it cannot be resized");
  if (nbytes == s->nbytes()) return;
  uint64_t fresh = nbytes ? pool_malloc(d, nbytes, "resizing a storage") : 0;
  c10::DataPtr owner = owning(d, fresh);  // freed again if the copy below raises
  uint64_t keep = std::min<uint64_t>(nbytes, s->nbytes());
  if (keep && s->data_ptr().get()) {
    uint64_t old = reinterpret_cast<uint64_t>(s->data_ptr().get());
    check(calls.copy_d2d(d, fresh, 0, d, old, 0, keep, calls.current_stream(d)), "copying a resized storage", d);
  }
  s->set_data_ptr_noswap(std::move(owner));  // the old block goes back to the pool
  s->set_nbytes(nbytes);
}

// Register the allocator for PrivateUse1 once; 0 on success.
// The address of resize_storage_bytes, which ral_guard.cpp's hooks call (guard/__init__.py
// hands it over: the two libraries do not link each other).
extern "C" void* ral_allocator_resize_fn() { return reinterpret_cast<void*>(&resize_storage_bytes); }

extern "C" int ral_allocator_install(const StatsCalls* rt) {
  if (installed.exchange(true)) return 0;
  calls = *rt;
  owner_pid = getpid();
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
  try {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &get_meta, &set_meta);
  } catch (...) {
    return 2;  // another extension registered PrivateUse1's metadata hooks: keep theirs
  }
  return 0;
}
