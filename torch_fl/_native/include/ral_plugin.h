/*
 * ral_plugin.h -- the torch_fl Runtime Abstraction Layer plugin ABI, version 1.
 *
 * This is the ONLY header a vendor plugin needs. It has no dependency on PyTorch,
 * on the torch_fl runtime, or on any C++ runtime. A plugin built against ABI 1.x
 * keeps loading on every later 1.y runtime:
 *   - fields are only ever APPENDED to the structs below, never removed or reordered;
 *   - the three structs that cross the boundary start with `struct_size` (see below);
 *   - a different ABI major version is refused at load time (status ABI_MISMATCH).
 *
 * struct_size, exactly as the runtime applies it (the min(struct_size, sizeof) rule):
 *   - ral_plugin_api (plugin -> runtime): the plugin sets sizeof(ral_plugin_api) as it
 *     was compiled. The runtime copies min(struct_size, its own sizeof) bytes; entries
 *     past that are NULL to it (an older plugin simply lacks newer OPTIONAL entries). A
 *     struct_size smaller than ABI 1.0's REQUIRED entries is refused (LOAD_FAILED).
 *   - ral_device_info (runtime -> plugin, filled by the plugin): the runtime zero-fills it
 *     and sets struct_size to its own sizeof before device_info(); the plugin writes at
 *     most min(info->struct_size, its own sizeof) bytes. Fields the plugin does not know
 *     stay zero; the runtime ignores the struct_size value the plugin leaves behind.
 *   - ral_kernel_call (runtime -> plugin, read-only): the runtime sets sizeof its own
 *     struct; a plugin reads only fields that end within min(call->struct_size, its own
 *     sizeof(ral_kernel_call)).
 * No other struct carries a size: ral_tensor and ral_scalar are frozen for ABI 1.
 * ral_plugin_sdk.h (optional, header-only) has ral_sdk_fill_struct for the device_info case.
 *
 * Lifetime of a plugin (in the manner of PJRT / Vulkan loaders):
 *   1. the runtime dlopen()s lib<name>.so from a plugin directory;
 *   2. it calls the single entry symbol RAL_PLUGIN_ENTRY_SYMBOL, passing its own ABI
 *      version, and gets back a pointer to a static ral_plugin_api table;
 *   3. it calls api->init(); RAL_ERROR_MISSING_DEPS there means "a vendor runtime
 *      library is absent" and the plugin is reported as MISSING_DEPS (retried on rescan);
 *   4. devices, memory, streams and kernels are then used through the table;
 *   5. api->shutdown() is called once before dlclose().
 *
 * Rules every plugin follows:
 *   - never abort(), never throw, never write to stdout; report failures with a status
 *     code and, where the optional last_error entry exists, a thread-local message;
 *   - never allocate outputs inside a kernel: the runtime allocates every output
 *     before the call ("out=" style);
 *   - treat every pointer the runtime passes as already validated against the live
 *     allocation table (the runtime's SecureContext does this before any call).
 *
 * Threading contract (what a plugin may assume, and must provide):
 *   - every entry may be called from any thread, concurrently with any other entry,
 *     on the same stream too: several threads may launch onto, copy on, query or
 *     synchronize one stream at once (the plugin serializes what it must). Work queued
 *     on a stream runs in the order its enqueueing calls returned;
 *   - handles outlive their uses: the runtime never passes a stream or event handle to
 *     any entry after, or concurrently with, its stream_destroy / event_destroy. It calls
 *     stream_destroy only once no call on that stream is in flight and after a
 *     stream_synchronize of it returned, and event_destroy only once no call with that
 *     event is in flight and, if a stream waited on the event, after those streams were
 *     synchronized (a queued wait may point at the event until it runs);
 *   - free() is called only for memory no queued work uses (see free below);
 *   - asynchronous failures (including out-of-range indices found on the device) are
 *     returned by the next stream_synchronize of the stream they ran on.
 * The runtime implements this with reference-counted stream and event slots
 * (torch_fl/_native/streams.c); torch_fl/_native/README.md has the runtime side.
 */
#ifndef RAL_PLUGIN_H
#define RAL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief ABI major version. A runtime refuses a plugin whose major differs. */
#define RAL_ABI_MAJOR 1
/*! \brief ABI minor version. Bumped when fields are appended; older minors still load. */
#define RAL_ABI_MINOR 0
/*! \brief The one symbol a plugin exports. Its name carries the major version. */
#define RAL_PLUGIN_ENTRY_SYMBOL "ral_plugin_entry_v1"

/*! \brief Maximum tensor rank carried in a kernel call. */
#define RAL_MAX_RANK 16

/*!
 * \brief Status code returned by every entry of the ABI.
 * RAL_OK is zero; anything else is an error, with detail from last_error().
 */
typedef enum {
  RAL_OK = 0,
  /*! \brief An argument is malformed (bad rank, shape mismatch, null handle). */
  RAL_ERROR_INVALID_ARGUMENT = 1,
  /*! \brief The device cannot satisfy an allocation. */
  RAL_ERROR_OUT_OF_MEMORY = 2,
  /*! \brief A pointer/offset/extent is not inside a live allocation of the device.
   *  Raised by the runtime's SecureContext; plugins may also return it. */
  RAL_ERROR_INVALID_POINTER = 3,
  /*! \brief The plugin does not support this request (dtype, layout, feature). */
  RAL_ERROR_UNSUPPORTED = 4,
  /*! \brief A kernel ran and reported failure. */
  RAL_ERROR_KERNEL_FAILED = 5,
  /*! \brief The device disappeared (unplugged, reset, plugin unloaded). */
  RAL_ERROR_DEVICE_LOST = 6,
  /*! \brief A vendor runtime library or driver the plugin needs is absent. */
  RAL_ERROR_MISSING_DEPS = 7,
  /*! \brief The plugin was built for another ABI major version. */
  RAL_ERROR_ABI_MISMATCH = 8,
  /*! \brief compile() failed; last_error() holds the compiler log. */
  RAL_ERROR_COMPILE_FAILED = 9,
  /*! \brief A bug or an unexpected state inside the plugin or runtime. */
  RAL_ERROR_INTERNAL = 10,
  /*! \brief Not an error: query() on a stream or event with work still pending. */
  RAL_ERROR_NOT_READY = 11,
  /*! \brief Runtime-level: the plugin library could not be dlopen()ed. */
  RAL_ERROR_LOAD_FAILED = 12,
} ral_status;

/*!
 * \brief Element type codes. The numbering is part of the ABI and never changes.
 * Sizes in bytes: BOOL 1, UINT8 1, INT8 1, INT16 2, INT32 4, INT64 8, FLOAT16 2,
 * BFLOAT16 2, FLOAT32 4, FLOAT64 8, COMPLEX64 8, COMPLEX128 16.
 */
typedef enum {
  RAL_DTYPE_BOOL = 0,
  RAL_DTYPE_UINT8 = 1,
  RAL_DTYPE_INT8 = 2,
  RAL_DTYPE_INT16 = 3,
  RAL_DTYPE_INT32 = 4,
  RAL_DTYPE_INT64 = 5,
  RAL_DTYPE_FLOAT16 = 6,
  RAL_DTYPE_BFLOAT16 = 7,
  RAL_DTYPE_FLOAT32 = 8,
  RAL_DTYPE_FLOAT64 = 9,
  RAL_DTYPE_COMPLEX64 = 10,
  RAL_DTYPE_COMPLEX128 = 11,
  /*! \brief Number of dtype codes; also marks an absent optional tensor in a call. */
  RAL_DTYPE_COUNT = 12,
} ral_dtype;

/*! \brief ral_device_info.flags: device memory can be read/written by the host CPU
 *  at the pointer value malloc returned (zero-copy CPU fallback is then possible). */
#define RAL_DEVICE_HOST_MAPPABLE (1u << 0)
/*! \brief ral_device_info.flags: the device has a DMA/copy engine that overlaps compute. */
#define RAL_DEVICE_HAS_DMA (1u << 1)
/*! \brief ral_device_info.flags: the device computes in float16 natively. */
#define RAL_DEVICE_FP16 (1u << 2)
/*! \brief ral_device_info.flags: the device computes in bfloat16 natively. */
#define RAL_DEVICE_BF16 (1u << 3)

/*!
 * \brief The standard device descriptor, filled by device_info().
 * The runtime zero-fills the struct and sets struct_size before the call; the plugin
 * writes only the fields it knows (those within its own sizeof).
 */
typedef struct {
  /*! \brief sizeof(ral_device_info) as the caller knows it. */
  uint32_t struct_size;
  /*! \brief Bit i set => dtype code i (ral_dtype) is supported for storage and copies. */
  uint32_t dtype_mask;
  /*! \brief RAL_DEVICE_* flags. */
  uint32_t flags;
  /*! \brief Largest tensor rank the kernels accept (<= RAL_MAX_RANK). */
  uint32_t max_rank;
  /*! \brief Total device memory in bytes (0 if unknown). */
  uint64_t total_memory;
  /*! \brief Largest single allocation in bytes (0 if unknown). */
  uint64_t max_alloc_size;
  /*! \brief Human-readable device name, NUL-terminated. */
  char name[128];
  /*! \brief Vendor name, NUL-terminated. */
  char vendor[64];
  /*! \brief Device class: "cpu", "gpu", "npu", "accelerator", ... */
  char type[32];
  /*! \brief Driver / runtime version string of the vendor stack. */
  char driver_version[64];
} ral_device_info;

/*! \brief Opaque plugin-owned stream (an in-order work queue). */
typedef struct ral_stream_s* ral_stream;
/*! \brief Opaque plugin-owned event (a marker recorded on a stream). */
typedef struct ral_event_s* ral_event;
/*! \brief Opaque plugin-owned compiled module (from compile()). */
typedef struct ral_module_s* ral_module;

/*!
 * \brief A tensor argument: DLPack-style view of device memory.
 * Element (i0, i1, ...) lives at byte
 *   (char*)data + byte_offset + sizeof(dtype) * sum_k(i_k * strides[k])
 * `data` is the exact value malloc() returned for the allocation (for opaque memory
 * such as an OpenCL cl_mem it is the handle); never pointer-arithmetic on it, use
 * byte_offset. Strides are in elements and are >= 0. A stride of 0 means broadcast.
 * An absent optional tensor (schema `Tensor?` given None) has dtype RAL_DTYPE_COUNT,
 * data NULL and ndim 0.
 */
typedef struct {
  /*! \brief Allocation base exactly as returned by malloc(). */
  void* data;
  /*! \brief Offset in bytes from `data` to element (0, ..., 0). */
  uint64_t byte_offset;
  /*! \brief A ral_dtype code. */
  int32_t dtype;
  /*! \brief Number of dimensions, 0..RAL_MAX_RANK. */
  int32_t ndim;
  /*! \brief Extent of each dimension; ndim entries. */
  const int64_t* sizes;
  /*! \brief Stride of each dimension in elements; ndim entries. */
  const int64_t* strides;
} ral_tensor;

/*! \brief Tag of a ral_scalar. */
typedef enum {
  /*! \brief The schema argument was None. */
  RAL_SCALAR_NONE = 0,
  /*! \brief v.i holds an integer (also SymInt, Layout, MemoryFormat). */
  RAL_SCALAR_INT = 1,
  /*! \brief v.f holds a double. */
  RAL_SCALAR_FLOAT = 2,
  /*! \brief v.i is 0 or 1. */
  RAL_SCALAR_BOOL = 3,
  /*! \brief v.i is a ral_dtype code. */
  RAL_SCALAR_DTYPE = 4,
  /*! \brief v.list points to `count` int64 values (int[], SymInt[]). */
  RAL_SCALAR_INT_LIST = 5,
  /*! \brief v.s points to a NUL-terminated string (e.g. gelu's approximate="tanh"). */
  RAL_SCALAR_STRING = 6,
} ral_scalar_tag;

/*! \brief A non-tensor argument of the op, tagged with its kind. */
typedef struct {
  /*! \brief A ral_scalar_tag. */
  int32_t tag;
  /*! \brief Number of elements for RAL_SCALAR_INT_LIST, else 0. */
  int32_t count;
  union {
    int64_t i;
    double f;
    const int64_t* list;
    const char* s;
  } v;
} ral_scalar;

/*!
 * \brief Everything a kernel receives. One shape for every kernel.
 *
 * Argument convention (fixed by the aten schema of the op the manifest entry names):
 *   - tensors[0 .. n_outputs-1] are the outputs. For a functional op these are fresh
 *     allocations of the result shape/dtype, laid out as PyTorch's meta kernel lays out
 *     the result: contiguous for most ops, a dense permutation where CPU keeps the
 *     inputs' layout (a pointwise op on transposed inputs, attention's [B, L, H, E]
 *     output); always contiguous for a "requires_contiguous" entry. For an in-place op
 *     (`add_.Tensor`) or an out= op they are the mutated arguments, which may be
 *     strided and may alias inputs.
 *   - tensors[n_outputs ..] are the inputs: every Tensor / Tensor? argument of the
 *     schema that is not an out= argument, in schema order (for in-place ops `self`
 *     appears here again). Tensor[] arguments contribute each element in order.
 *   - scalars[] are every non-tensor argument of the schema, in schema order, with
 *     defaults filled in. A Tensor[] argument contributes one RAL_SCALAR_INT whose
 *     value is the list's length, at the list's place in the scalar order.
 *   - for an entry with "broadcast": false in the manifest, the runtime has already
 *     expanded every input to the output shape (stride-0 dimensions), and for
 *     "requires_contiguous": true every input and output is contiguous.
 * The struct, and every array it points to, is valid only during launch(). A plugin
 * that executes later must copy what it needs.
 */
typedef struct {
  /*! \brief sizeof(ral_kernel_call) as the runtime knows it. */
  uint32_t struct_size;
  /*! \brief Plugin-local device index. */
  int32_t device;
  /*! \brief The stream to run on. */
  ral_stream stream;
  /*! \brief Number of output tensors (first in `tensors`). */
  int32_t n_outputs;
  /*! \brief Number of input tensors (after the outputs). */
  int32_t n_inputs;
  /*! \brief n_outputs + n_inputs tensor descriptors. */
  const ral_tensor* tensors;
  /*! \brief Number of scalar arguments. */
  int32_t n_scalars;
  /*! \brief Scalar arguments in schema order. */
  const ral_scalar* scalars;
  /*! \brief Aten overload name ("aten::add.Tensor"), for error messages only. */
  const char* op_name;
} ral_kernel_call;

/*! \brief Every kernel has this one signature. Returns RAL_OK or an error status. */
typedef ral_status (*ral_kernel_fn)(const ral_kernel_call* call);

/*!
 * \brief The plugin's function table, returned by the entry symbol.
 * Entries marked REQUIRED must be non-NULL. OPTIONAL entries may be NULL; the runtime
 * then uses a generic path (memset via a host staging copy) or reports the feature
 * as unavailable (compile => no jit tier on this device).
 * Device indices are plugin-local: 0 .. device_count-1.
 */
typedef struct {
  /*! \brief sizeof(ral_plugin_api) as the plugin was compiled. */
  uint32_t struct_size;
  /*! \brief RAL_ABI_MAJOR the plugin was built with. */
  uint16_t abi_major;
  /*! \brief RAL_ABI_MINOR the plugin was built with. */
  uint16_t abi_minor;
  /*! \brief Short plugin name, e.g. "host". Static storage. */
  const char* plugin_name;
  /*! \brief Plugin version string, e.g. "1.0.0". Static storage. */
  const char* plugin_version;

  /*! \brief REQUIRED. Bring up the vendor stack; called once, before any other entry.
   *  \return RAL_OK; RAL_ERROR_MISSING_DEPS if a vendor library or driver is absent (the
   *  plugin shows MISSING_DEPS and init is retried on rescan); any other status fails the load. */
  ral_status (*init)(void);
  /*! \brief REQUIRED. Release everything; no other entry is called afterwards.
   *  Called once before dlclose(); must not fail and returns nothing. */
  void (*shutdown)(void);

  /*! \brief REQUIRED. Number of devices this plugin drives (may be 0).
   *  \param count out: the device count; local indices are 0 .. count-1.
   *  \return RAL_OK or an error status. */
  ral_status (*device_count)(int32_t* count);
  /*! \brief REQUIRED. Fill the device descriptor of one device.
   *  \param device plugin-local index.
   *  \param info zero-filled by the runtime, struct_size set; write at most
   *  min(info->struct_size, sizeof) bytes.
   *  \return RAL_OK or an error status (the plugin's devices are then not used). */
  ral_status (*device_info)(int32_t device, ral_device_info* info);

  /*! \brief REQUIRED. Allocate nbytes (>0) of device memory, at least 64-byte aligned.
   *  \param device plugin-local index.
   *  \param nbytes bytes wanted, > 0.
   *  \param ptr out: the allocation (a host pointer, or an opaque handle such as a cl_mem).
   *  \return RAL_OK; RAL_ERROR_OUT_OF_MEMORY when the device is full (the runtime then
   *  empties its cache and retries once before raising torch.OutOfMemoryError). */
  ral_status (*malloc)(int32_t device, uint64_t nbytes, void** ptr);
  /*! \brief REQUIRED. Free memory from malloc(). The runtime guarantees no queued work
   *  still uses it (it synchronizes the owning stream first).
   *  \param device plugin-local index.  \param ptr exactly a value malloc() returned.
   *  \return RAL_OK or an error status. */
  ral_status (*free)(int32_t device, void* ptr);

  /*! \brief REQUIRED. Host -> device copy, ordered on `stream`. `src` may be reused by the
   *  caller as soon as this returns (stage or copy synchronously if needed).
   *  \param dst an allocation; the copy lands at dst + dst_offset (validated in range).
   *  \param src host memory of nbytes.  \param stream the stream to order it on.
   *  \return RAL_OK or an error status. */
  ral_status (*memcpy_h2d)(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                           uint64_t nbytes, ral_stream stream);
  /*! \brief REQUIRED. Device -> host copy, ordered on `stream`. `dst` is valid once the
   *  stream is synchronized.
   *  \param dst host memory of nbytes.  \param src an allocation, read from src + src_offset.
   *  \return RAL_OK or an error status. */
  ral_status (*memcpy_d2h)(int32_t device, void* dst, const void* src, uint64_t src_offset,
                           uint64_t nbytes, ral_stream stream);
  /*! \brief REQUIRED. Device -> device copy within one device, ordered on `stream`.
   *  \return RAL_OK or an error status. */
  ral_status (*memcpy_d2d)(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                           uint64_t src_offset, uint64_t nbytes, ral_stream stream);

  /*! \brief REQUIRED. Create an in-order stream.
   *  \param stream out: the new stream.
   *  \return RAL_OK or an error status. */
  ral_status (*stream_create)(int32_t device, ral_stream* stream);
  /*! \brief REQUIRED. Destroy a stream after its work completes.
   *  The runtime calls it only once no other thread uses the stream.
   *  \return RAL_OK or an error status. */
  ral_status (*stream_destroy)(int32_t device, ral_stream stream);
  /*! \brief REQUIRED. Block until all work on the stream is done.
   *  \return RAL_OK, or the first error of asynchronous work since the last synchronize
   *  (which it clears), with its message available through last_error(). */
  ral_status (*stream_synchronize)(int32_t device, ral_stream stream);
  /*! \brief REQUIRED. Whether all work queued on the stream is done; never blocks.
   *  \return RAL_OK if idle, RAL_ERROR_NOT_READY if work is pending, else an error. */
  ral_status (*stream_query)(int32_t device, ral_stream stream);

  /*! \brief REQUIRED. Create an event (not yet recorded).
   *  \param event out: the new event.  \return RAL_OK or an error status. */
  ral_status (*event_create)(int32_t device, ral_event* event);
  /*! \brief REQUIRED. Destroy an event; the runtime calls it once no thread uses it.
   *  \return RAL_OK or an error status. */
  ral_status (*event_destroy)(int32_t device, ral_event event);
  /*! \brief REQUIRED. Record the event at the current tail of `stream` (re-recording
   *  moves it).  \return RAL_OK or an error status. */
  ral_status (*event_record)(int32_t device, ral_event event, ral_stream stream);
  /*! \brief REQUIRED. Block until the event's recorded work is done (at once if it was
   *  never recorded).  \return RAL_OK or an error status. */
  ral_status (*event_synchronize)(int32_t device, ral_event event);
  /*! \brief REQUIRED. Whether the event's recorded work is done; never blocks.
   *  \return RAL_OK if done (or never recorded), RAL_ERROR_NOT_READY otherwise. */
  ral_status (*event_query)(int32_t device, ral_event event);
  /*! \brief REQUIRED. Work queued on `stream` after this call waits for `event`
   *  (the host does not block).  \return RAL_OK or an error status. */
  ral_status (*stream_wait_event)(int32_t device, ral_stream stream, ral_event event);
  /*! \brief REQUIRED. Milliseconds between two completed events.
   *  \param ms out: end minus start.  \return RAL_OK, RAL_ERROR_NOT_READY if either is
   *  pending, or an error status. */
  ral_status (*event_elapsed_ms)(int32_t device, ral_event start, ral_event end, float* ms);

  /*! \brief REQUIRED. Look a kernel up by the symbol name a manifest entry names.
   *  \param symbol the manifest entry's "kernel".  \param kernel out: the kernel.
   *  \return RAL_OK; RAL_ERROR_UNSUPPORTED (and *kernel = NULL) if there is no such kernel
   *  (the entry is then disabled and the plugin shows DEGRADED). */
  ral_status (*get_kernel)(const char* symbol, ral_kernel_fn* kernel);
  /*! \brief REQUIRED. Run `kernel` with `call` on call->stream, asynchronously if the
   *  plugin can. `call` and its arrays are valid only during this call.
   *  \return RAL_OK; a synchronous error is returned here, an asynchronous one by the
   *  next stream_synchronize(). */
  ral_status (*launch)(ral_kernel_fn kernel, const ral_kernel_call* call);

  /*! \brief OPTIONAL. Thread-local message describing the last error of this thread
   *  (or of the asynchronous failure returned by stream_synchronize). Never NULL when
   *  the entry exists; "" when there is nothing to say.
   *  \return a NUL-terminated string owned by the plugin, valid until the thread's next call. */
  const char* (*last_error)(void);
  /*! \brief OPTIONAL. Fill nbytes at dst+offset with the byte `value`, ordered on `stream`.
   *  \return RAL_OK or an error status (NULL entry: the runtime stages a host copy). */
  ral_status (*memset)(int32_t device, void* dst, uint64_t offset, int32_t value,
                       uint64_t nbytes, ral_stream stream);
  /*! \brief OPTIONAL. Compile `source` written in `lang` ("c", "opencl-c", "cuda")
   *  for `device` with compiler `options`. On failure returns COMPILE_FAILED and the
   *  compiler log through last_error(). Kernels of the module follow ral_kernel_fn.
   *  \param module out: the compiled module.  \return RAL_OK, RAL_ERROR_COMPILE_FAILED,
   *  or RAL_ERROR_UNSUPPORTED for a language the plugin cannot compile. */
  ral_status (*compile)(int32_t device, const char* lang, const char* source,
                        const char* options, ral_module* module);
  /*! \brief OPTIONAL (required if compile exists). Find a kernel in a compiled module.
   *  \param name the kernel's function name.  \param kernel out: the kernel.
   *  \return RAL_OK or RAL_ERROR_UNSUPPORTED. */
  ral_status (*module_get_kernel)(ral_module module, const char* name, ral_kernel_fn* kernel);
  /*! \brief OPTIONAL (required if compile exists). Free a compiled module; its kernels
   *  are not called afterwards.  \return RAL_OK or an error status. */
  ral_status (*module_destroy)(ral_module module);
} ral_plugin_api;

/*!
 * \brief Type of the entry symbol. The runtime passes its own ABI version so that a
 * newer plugin may adapt to an older runtime; the plugin returns its static table, or
 * NULL if it cannot serve this runtime at all.
 */
typedef const ral_plugin_api* (*ral_plugin_entry_fn)(uint16_t runtime_abi_major,
                                                     uint16_t runtime_abi_minor);

/*! \brief Declares the entry symbol with the right name and visibility (a build may
 *  define its own, e.g. make RAL_PLUGIN_EXPORT='__attribute__((visibility("default"),used))'). */
#ifndef RAL_PLUGIN_EXPORT
#define RAL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif

#endif /* RAL_PLUGIN_H */
