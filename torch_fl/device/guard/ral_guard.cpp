// A C++ DeviceGuardImpl for the PrivateUse1 ("ral") device type.
//
// Why this exists: the Python-registrable device guard of torch._C._acc reports exactly one
// device, and the autograd engine sizes its per-device ready queues from that count, so a
// backward pass on ral:1 trips an internal assert. This shim reports as many devices as the
// runtime found (plus headroom for hot-plug) and tracks the current device per thread.
// It is compiled against the installed torch at first import (see __init__.py) and contains
// no torch_fl logic: the current stream, streams and events live in the native runtime, and
// what torch asks of the guard (the current stream, which the autograd engine switches to
// run each backward op on its forward op's stream; events, with which it orders streams;
// torch.accelerator.synchronize(), torch.Stream/torch.Event calls) is forwarded to the
// runtime's C entry points, handed over with ral_guard_set_runtime: plain thread-safe C,
// so no Python and no GIL is involved. The current device lives there too (per thread), so
// torch.accelerator.set_device_index, the autograd engine's device threads and
// torch.ral.set_device all read and write one store.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace {

std::atomic<int> visible_devices{8};

// The runtime's calls (ral_runtime.h); null until torch_fl registers them.
struct RuntimeCalls {
  int (*device_synchronize)(int32_t device);
  int (*stream_synchronize)(int32_t device, int32_t stream);
  int (*stream_query)(int32_t device, int32_t stream);
  const char* (*last_error)();
  int32_t (*current_stream)(int32_t device);
  int (*set_current_stream)(int32_t device, int32_t stream);
  int (*event_create)(int32_t device, int32_t* event);
  int (*event_destroy)(int32_t device, int32_t event);
  int (*event_record)(int32_t device, int32_t event, int32_t stream);
  int (*event_synchronize)(int32_t device, int32_t event);
  int (*event_query)(int32_t device, int32_t event);
  int (*stream_wait_event)(int32_t device, int32_t stream, int32_t event);
  int (*stream_create)(int32_t device, int32_t* stream);
  int32_t (*current_device)();
  void (*set_current_device)(int32_t device);
  int (*device_count)();
  int (*event_elapsed_ms)(int32_t device, int32_t start, int32_t end, float* ms);
  int not_ready;  // RAL_ERROR_NOT_READY
};
RuntimeCalls runtime_calls;
std::atomic<const RuntimeCalls*> runtime{nullptr};

// A c10 event handle (void*) packs the runtime's per-device event id with its device:
// (device << 32) | (id + 1), so null stays "never recorded".
void* pack_event(c10::DeviceIndex d, int32_t id) {
  return reinterpret_cast<void*>((static_cast<uintptr_t>(static_cast<uint16_t>(d)) << 32) |
                                 (static_cast<uint32_t>(id) + 1u));
}
c10::DeviceIndex event_device(void* e) {
  return static_cast<c10::DeviceIndex>(static_cast<int16_t>(reinterpret_cast<uintptr_t>(e) >> 32));
}
int32_t event_id(void* e) { return static_cast<int32_t>((reinterpret_cast<uintptr_t>(e) & 0xffffffffu) - 1u); }

const RuntimeCalls& calls() {
  const RuntimeCalls* rt = runtime.load();
  TORCH_CHECK(rt, "ral: the runtime has not handed its stream and event calls to the device guard");
  return *rt;
}

void check_status(const RuntimeCalls& rt, int status, const char* what, c10::DeviceIndex d) {
  if (status == 0) return;
  const char* msg = rt.last_error ? rt.last_error() : nullptr;
  TORCH_CHECK(false, "ral:", static_cast<int>(d), " ", what, ": ", msg ? msg : "runtime error ", status);
}

// A query's answer: RAL_OK is done, RAL_ERROR_NOT_READY is not yet, anything else raises.
bool query_done(const RuntimeCalls& rt, int status, const char* what, c10::DeviceIndex d) {
  if (status == rt.not_ready) return false;
  check_status(rt, status, what, d);
  return true;
}

// The thread's current device (0 before the runtime is handed over).
c10::DeviceIndex current_index() {
  const RuntimeCalls* rt = runtime.load();
  return rt ? static_cast<c10::DeviceIndex>(rt->current_device()) : 0;
}

// A device with no index ("ral") means the thread's current device, as on CUDA.
c10::Device resolve(c10::Device d) {
  return d.has_index() ? d : c10::Device(c10::DeviceType::PrivateUse1, current_index());
}

// Setting a device the runtime does not have raises, as cudaSetDevice's "invalid device ordinal".
void set_checked(c10::Device d) {
  const RuntimeCalls& rt = calls();
  c10::DeviceIndex i = resolve(d).index();
  int n = rt.device_count();
  TORCH_CHECK(i >= 0 && i < n, "ral:", static_cast<int>(i), " does not exist: ", n,
                    " ral device(s) are visible (ralctl list-devices)");
  rt.set_current_device(i);
}

constexpr int kPoolStreams = 4;
std::mutex pool_mutex;
std::map<c10::DeviceIndex, std::pair<std::vector<int32_t>, unsigned>> stream_pool;  // ids, next

c10::Stream pooled(c10::Device d) {
  const RuntimeCalls& rt = calls();
  d = resolve(d);
  std::lock_guard<std::mutex> lock(pool_mutex);
  auto& [ids, next] = stream_pool[d.index()];
  if (ids.size() < kPoolStreams) {
    int32_t id = 0;
    check_status(rt, rt.stream_create(d.index(), &id), "stream create", d.index());
    ids.push_back(id);
  }
  return c10::Stream(c10::Stream::UNSAFE, d, ids[next++ % ids.size()]);
}

struct RalGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (resolve(d) != old) set_checked(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::PrivateUse1, current_index()); }
  void setDevice(c10::Device d) const override { set_checked(d); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    const RuntimeCalls* rt = runtime.load();
    if (rt && d.has_index()) rt->set_current_device(d.index());
  }
  // The current stream lives in the runtime (per thread), where torch_fl's ops read it.
  c10::Stream getStream(c10::Device d) const noexcept override {
    d = resolve(d);
    const RuntimeCalls* rt = runtime.load();
    int32_t id = rt ? rt->current_stream(d.index()) : 0;
    return id ? c10::Stream(c10::Stream::UNSAFE, d, id) : c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, resolve(d)); }
  // torch.Stream(device="ral:N") and other pool users: like CUDA's stream pool, a few streams
  // per device created on first use and handed out round robin (a c10::Stream has no owner
  // to destroy it, so streams made here live as long as the process).
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return pooled(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return pooled(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    c10::Stream old = getStream(s.device());
    const RuntimeCalls* rt = runtime.load();
    if (rt) rt->set_current_stream(s.device_index(), static_cast<int32_t>(s.id()));
    return old;
  }
  // torch.accelerator.get_device_capability: the dtypes a ral tensor may have and convert
  // between (natively, through wider kernels or PyTorch's CPU kernel); tests/backend_contract/
  // test_device_facts.py allocates and converts each. Not quantized or sub-byte types.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    for (auto i : {c10::kIndex_Byte, c10::kIndex_Char, c10::kIndex_Short, c10::kIndex_Int, c10::kIndex_Long,
                   c10::kIndex_Half, c10::kIndex_Float, c10::kIndex_Double, c10::kIndex_ComplexFloat,
                   c10::kIndex_ComplexDouble, c10::kIndex_Bool, c10::kIndex_BFloat16, c10::kIndex_UInt16,
                   c10::kIndex_UInt32, c10::kIndex_UInt64, c10::kIndex_Float8_e5m2, c10::kIndex_Float8_e4m3fn})
      cap.capability_data.capability_bits |= 1ULL << i;
    return cap;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(visible_devices.load());
  }

  // Events: the autograd engine records one on a producer stream and makes the consumer
  // stream wait for it whenever a gradient crosses streams (a forward run under
  // torch.ral.stream(s)); torch.Event uses them too.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    const RuntimeCalls& rt = calls();
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    if (!*event) {
      int32_t id = 0;
      check_status(rt, rt.event_create(stream.device_index(), &id), "event create", stream.device_index());
      *event = pack_event(stream.device_index(), id);
    }
    c10::DeviceIndex d = event_device(*event);
    TORCH_CHECK(d == stream.device_index(), "Event device index ", static_cast<int>(d),
                " does not match recording stream's device index ", static_cast<int>(stream.device_index()), ".");
    check_status(rt, rt.event_record(d, event_id(*event), static_cast<int32_t>(stream.id())), "event record", d);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    const RuntimeCalls& rt = calls();
    c10::DeviceIndex d = event_device(event);
    if (d == stream.device_index())
      check_status(rt, rt.stream_wait_event(d, static_cast<int32_t>(stream.id()), event_id(event)),
                   "stream wait", d);
    else  // event ids are per device: wait on the host (cross-device copies synchronize anyway)
      check_status(rt, rt.event_synchronize(d, event_id(event)), "event synchronize", d);
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    const RuntimeCalls& rt = calls();
    return query_done(rt, rt.event_query(event_device(event), event_id(event)), "event query", event_device(event));
  }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    const RuntimeCalls& rt = calls();
    check_status(rt, rt.event_synchronize(event_device(event), event_id(event)), "event synchronize",
                 event_device(event));
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    const RuntimeCalls* rt = runtime.load();
    if (event && rt) rt->event_destroy(event_device(event), event_id(event));
  }
  // torch.Event(enable_timing=True).elapsed_time: c10::Event has already checked that both
  // were recorded with timing and are complete.
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    const RuntimeCalls& rt = calls();
    TORCH_CHECK(start && end, "ral: both events must be recorded before calculating elapsed time");
    c10::DeviceIndex d = event_device(start);
    TORCH_CHECK(d == event_device(end), "ral: elapsed_time between an event of ral:", static_cast<int>(d),
                " and one of ral:", static_cast<int>(event_device(end)), ": both events must be on one device");
    float ms = 0;
    check_status(rt, rt.event_elapsed_ms(d, event_id(start), event_id(end), &ms), "event elapsed time", d);
    return ms;
  }
  bool queryStream(const c10::Stream& s) const override {
    const RuntimeCalls& rt = calls();
    return query_done(rt, rt.stream_query(s.device_index(), static_cast<int32_t>(s.id())), "stream query",
                      s.device_index());
  }
  void synchronizeStream(const c10::Stream& s) const override {
    const RuntimeCalls& rt = calls();
    check_status(rt, rt.stream_synchronize(s.device_index(), static_cast<int32_t>(s.id())), "stream synchronize",
                 s.device_index());
  }
  void synchronizeDevice(const c10::DeviceIndex d) const override {
    const RuntimeCalls& rt = calls();
    check_status(rt, rt.device_synchronize(d), "synchronize", d);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, RalGuardImpl);

// The autograd profiler's device hooks (torch.autograd.profiler.profile(use_device="ral")):
// it records an event on the current device's current stream at each op's start and end and
// asks the time between them, as it does with CUDA events. Without them every op logs
// "PrivateUse1 used in profiler but not enabled" and the profile's times are garbage.
struct RalProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const RuntimeCalls& rt = calls();
    c10::DeviceIndex d = current_index();
    if (device) *device = d;
    int32_t id = 0;
    check_status(rt, rt.event_create(d, &id), "profiler event create", d);
    void* packed = pack_event(d, id);
    *event = std::shared_ptr<void>(packed, [](void* e) {
      const RuntimeCalls* r = runtime.load();
      if (r) r->event_destroy(event_device(e), event_id(e));
    });
    if (cpu_ns) *cpu_ns = c10::getTime();
    check_status(rt, rt.event_record(d, id, rt.current_stream(d)), "profiler event record", d);
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    const RuntimeCalls& rt = calls();
    void* e1 = a->get();
    void* e2 = b->get();
    c10::DeviceIndex d = event_device(e1);
    TORCH_CHECK(d == event_device(e2), "ral profiler: events of two devices");
    check_status(rt, rt.event_synchronize(d, event_id(e1)), "profiler event synchronize", d);
    check_status(rt, rt.event_synchronize(d, event_id(e2)), "profiler event synchronize", d);
    float ms = 0;
    check_status(rt, rt.event_elapsed_ms(d, event_id(e1), event_id(e2), &ms), "profiler elapsed time", d);
    return ms * 1000.0f;  // microseconds, as the CUDA stubs answer
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const RuntimeCalls& rt = calls();
    c10::DeviceIndex prev = current_index();
    for (int d = 0; d < rt.device_count(); d++) {
      rt.set_current_device(d);
      op(d);
    }
    rt.set_current_device(prev);
  }
  void synchronize() const override {
    const RuntimeCalls& rt = calls();
    check_status(rt, rt.device_synchronize(current_index()), "synchronize", current_index());
  }
};

// Pinned host memory (DataLoader(pin_memory=True), Tensor.pin_memory()). PyTorch asks the
// accelerator's hooks for a pinned allocator; the ral runtime copies through ordinary host
// memory, so "pinned" blocks are plain 64-byte-aligned host allocations whose ranges are
// remembered, so is_pinned() answers true for exactly the tensors pin_memory() made.
std::mutex pinned_mutex;
std::map<std::uintptr_t, std::size_t> pinned_blocks;  // start -> size

void free_pinned(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned_blocks.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  std::free(p);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(std::size_t n) override {
    void* p = nullptr;
    if (n) {
      p = std::aligned_alloc(64, (n + 63) / 64 * 64);
      TORCH_CHECK_WITH(OutOfMemoryError, p, "ral: cannot allocate ", n, " bytes of pinned host memory");
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned_blocks[reinterpret_cast<std::uintptr_t>(p)] = n;
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator pinned_allocator;

// torch.Generator(device="ral:N"): a Philox (seed, offset) pair, the state torch_fl's random
// kernels take ([seed, offset] per launch, offset advanced by the values drawn). torch_fl reads
// and advances it from Python through torch.Generator's initial_seed/get_offset/set_offset. The
// state tensor is 16 bytes (int64 seed, int64 offset), the tail of CUDA's Philox state layout.
constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // c10's default_rng_seed_val

struct RalGeneratorImpl final : public c10::GeneratorImpl {
  explicit RalGeneratorImpl(c10::DeviceIndex d)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, d), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  uint64_t state[2] = {kDefaultSeed, 0};  // seed, offset: the default generators' are read by torch_fl in place

  void set_current_seed(uint64_t seed) override {
    state[0] = seed;
    state[1] = 0;
  }
  void set_offset(uint64_t offset) override { state[1] = offset; }
  uint64_t get_offset() const override { return state[1]; }
  uint64_t current_seed() const override { return state[0]; }
  uint64_t seed() override {
    std::random_device rd;
    uint64_t s = (static_cast<uint64_t>(rd()) << 32 | rd()) & ((1ULL << 63) - 1);
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& t) override {
    TORCH_CHECK_TYPE(t.dtype() == caffe2::TypeMeta::Make<uint8_t>() && t.device().is_cpu(),
                     "ral: RNG state must be a torch.ByteTensor on the CPU");
    TORCH_CHECK_VALUE(t.numel() == 16 && t.is_contiguous(), "ral: RNG state must hold 16 bytes (seed, offset), got ",
                      t.numel());
    std::memcpy(state, t.data(), 16);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::TensorBase t = at::detail::empty_cpu({16}, c10::ScalarType::Byte, std::nullopt, std::nullopt, std::nullopt,
                                             std::nullopt);
    std::memcpy(t.data_ptr(), state, 16);
    return t.getIntrusivePtr();
  }
  RalGeneratorImpl* clone_impl() const override {
    auto* g = new RalGeneratorImpl(device().index());
    std::memcpy(g->state, state, sizeof state);
    return g;
  }
};

// One default generator per device (torch.ral.manual_seed & co. and every random op without
// generator= use it); a deque so references stay valid as devices are added.
std::mutex generator_mutex;
std::deque<at::Generator> default_generators;

const at::Generator& default_generator(c10::DeviceIndex d) {
  TORCH_CHECK(d >= 0 && d < 64, "ral: no default generator for device ", static_cast<int>(d));
  std::lock_guard<std::mutex> lock(generator_mutex);
  while (static_cast<int>(default_generators.size()) <= d)
    default_generators.push_back(
        at::make_generator<RalGeneratorImpl>(static_cast<c10::DeviceIndex>(default_generators.size())));
  return default_generators[d];
}
std::atomic<int> real_devices{0};

// ral_allocator.cpp's resize_storage_bytes once that shim is loaded (null without it).
std::atomic<void (*)(const c10::Storage&, size_t)> resize_bytes{nullptr};

struct RalHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return real_devices.load() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    return default_generator(d < 0 ? current_index() : d);
  }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    return at::make_generator<RalGeneratorImpl>(d < 0 ? current_index() : d);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator; }
  bool isPinnedPtr(const void* data) const override {
    auto p = reinterpret_cast<std::uintptr_t>(data);
    std::lock_guard<std::mutex> lock(pinned_mutex);
    auto it = pinned_blocks.upper_bound(p);
    if (it == pinned_blocks.begin()) return false;
    --it;
    return p < it->first + (it->second ? it->second : 1);
  }
  // UntypedStorage.resize_ of a ral storage.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    auto fn = resize_bytes.load();
    TORCH_CHECK_NOT_IMPLEMENTED(fn, "torch_fl: resizing a ral storage needs the C++ allocator shim, which could "
                                    "not be built against this torch (see torch_fl/device/guard/README.md)");
    fn(storage, nbytes);
  }
};

}  // namespace

// Called once by torch_fl instead of registering the Python hooks object (which has no
// pinned-memory allocator); returns 0 on success.
extern "C" __attribute__((visibility("default"))) int ral_guard_register_hooks(int devices) {
  static RalHooks hooks;
  real_devices.store(devices);
  try {
    at::RegisterPrivateUse1HooksInterface(&hooks);
  } catch (...) {
    return 1;
  }
  return 0;
}

// Called by torch_fl once ral_allocator.cpp is loaded, with its ral_allocator_resize_fn().
extern "C" __attribute__((visibility("default"))) void ral_guard_set_resize(void* fn) {
  resize_bytes.store(reinterpret_cast<void (*)(const c10::Storage&, size_t)>(fn));
}

// Called once by torch_fl after device discovery, before any backward pass.
extern "C" __attribute__((visibility("default"))) void ral_guard_set_device_count(int n) {
  visible_devices.store(n < 1 ? 1 : n);
}

// Called once by torch_fl with the runtime's entry points (see RuntimeCalls), in its order.
extern "C" __attribute__((visibility("default"))) void ral_guard_set_runtime(const RuntimeCalls* calls) {
  runtime_calls = *calls;
  runtime.store(&runtime_calls);
  static RalProfilerStubs profiler_stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&profiler_stubs);
}

// The (seed, offset) pair of a device's default generator, which torch_fl's random ops read
// and advance in place (under torch_fl's RNG lock).
extern "C" __attribute__((visibility("default"))) uint64_t* ral_guard_default_rng_state(int device) {
  try {
    return static_cast<RalGeneratorImpl*>(default_generator(static_cast<c10::DeviceIndex>(device)).unsafeGetGeneratorImpl())->state;
  } catch (...) {
    return nullptr;
  }
}
