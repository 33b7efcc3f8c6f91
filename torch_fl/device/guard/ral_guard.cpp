// A C++ DeviceGuardImpl for the PrivateUse1 ("ral") device type.
//
// Why this exists: the Python-registrable device guard of torch._C._acc reports exactly one
// device, and the autograd engine sizes its per-device ready queues from that count, so a
// backward pass on ral:1 trips an internal assert. This shim reports as many devices as the
// runtime found (plus headroom for hot-plug) and tracks the current device per thread.
// It is compiled against the installed torch at first import (see __init__.py) and contains
// no torch_fl logic: streams and events stay in the Python/native layers.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>

namespace {

thread_local c10::DeviceIndex current_device = 0;
std::atomic<int> visible_devices{8};

struct RalGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    current_device = d.index();
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, current_device);
  }
  void setDevice(c10::Device d) const override { current_device = d.index(); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { current_device = d.index(); }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(visible_devices.load());
  }

  // Events. The autograd engine records and waits on events when gradients cross devices.
  // Every torch_fl transfer between devices is already synchronous on both sides (the
  // runtime stages it through the host and synchronizes), so there is nothing to order:
  // recording is a no-op and an event is always complete.
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (event) *event = nullptr;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, RalGuardImpl);

}  // namespace

// Called once by torch_fl after device discovery, before any backward pass.
extern "C" __attribute__((visibility("default"))) void ral_guard_set_device_count(int n) {
  visible_devices.store(n < 1 ? 1 : n);
}
