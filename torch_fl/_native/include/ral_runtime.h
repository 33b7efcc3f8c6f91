/*
 * ral_runtime.h -- the native RAL runtime's API, as the Python layer sees it (via cffi).
 *
 * The runtime sits between Python and the plugins. It owns plugin discovery and
 * loading (ABI checks), the DeviceManager (global device numbering), the MemoryPool
 * (caching, stream-ordered), the SecureContext (pointer validation) and the uniform
 * stream/event layer. It never includes a PyTorch header.
 *
 * Conventions:
 *   - every function returns a ral_status (0 = RAL_OK); on error, rt_last_error()
 *     returns a thread-local message that names the plugin and the operation;
 *   - devices are GLOBAL indices 0..rt_device_count()-1 (the `N` of "ral:N");
 *   - streams and events are small integer ids, per device; stream 0 is the device's
 *     default stream and always exists;
 *   - device pointers are the exact values the plugin's malloc returned, carried as
 *     uint64_t; byte offsets travel separately.
 *
 * The build script feeds this file (minus preprocessor lines) to cffi's cdef, so it
 * must stay plain C declarations.
 */
#ifndef RAL_RUNTIME_H
#define RAL_RUNTIME_H

#include <stdint.h>
#include "ral_plugin.h"

/* Plugin status as reported by rt_plugin_get (and `ralctl plugin-status`). The
 * Python layer may refine LOADED into DEGRADED / INVALID_MANIFEST after reading the
 * manifest. */
enum {
  RT_PLUGIN_LOADED = 0,
  RT_PLUGIN_MISSING_DEPS = 1,
  RT_PLUGIN_ABI_MISMATCH = 2,
  RT_PLUGIN_LOAD_FAILED = 3,
  RT_PLUGIN_GONE = 4,
  /* Another plugin of the same name was found first (earlier root or directory);
   * this copy is not loaded. Re-evaluated on rescan. */
  RT_PLUGIN_SHADOWED = 5,
  /* The plugin folder, its manifest or its library (or a folder above them) may be
   * written by someone other than its owner, or belongs to another non-root user
   * (include/ral_trust.h); not loaded. The reason names the path:
   * "world-writable <path>". TORCH_FL_ALLOW_INSECURE_PLUGINS accepts it. */
  RT_PLUGIN_INSECURE = 6,
  /* Loaded, then answered garbage the runtime cannot work with (a malformed device
   * descriptor, an alloc that is not a pointer, ...); its devices are not used. */
  RT_PLUGIN_FAILED = 7
};

/* Runtime-only status (never a plugin's): a wait on the device did not return within the
 * hang timeout; the device is marked lost. Python raises torch_fl.DeviceHangError. */
#define RAL_ERROR_DEVICE_HANG 13

/* Where a plugin came from, in discovery order. */
enum {
  RT_SOURCE_BUILTIN = 0,
  RT_SOURCE_ENV_PATH = 1,
  RT_SOURCE_SYSTEM = 2
};

typedef struct {
  int32_t status;             /* RT_PLUGIN_* */
  int32_t source;             /* RT_SOURCE_* */
  int32_t abi_major;          /* as reported by the plugin (0 if unknown) */
  int32_t abi_minor;
  int32_t n_devices;          /* devices this plugin contributed */
  int32_t has_compile;        /* 1 if the optional compile entry exists */
  char name[64];              /* plugin_name from the table, else the directory name */
  char version[32];
  char dir[1024];             /* the plugin directory (holds manifest.json) */
  char library[1024];         /* the shared library path */
  char reason[1024];          /* why it is not LOADED ("" when loaded) */
} rt_plugin_record;

typedef struct {
  int32_t plugin;             /* index for rt_plugin_get */
  int32_t local_index;        /* plugin-local device index */
  int32_t present;            /* 0 once the plugin is gone (hot unplug) */
  ral_device_info info;
} rt_device_record;

typedef struct {
  uint64_t allocated_bytes;       /* bytes in live (handed-out) blocks, requested sizes */
  uint64_t reserved_bytes;        /* bytes held from the plugin: live + cached blocks */
  uint64_t peak_allocated_bytes;  /* max of allocated_bytes since reset */
  uint64_t peak_reserved_bytes;
  uint64_t limit_bytes;           /* per-device limit; 0 = none */
  uint64_t num_allocs;            /* rt_malloc calls that succeeded */
  uint64_t num_frees;
  uint64_t num_cache_hits;        /* allocations served from the cache */
  uint64_t num_plugin_mallocs;    /* calls into the plugin's malloc */
  uint64_t num_plugin_frees;
  uint64_t num_ooms;
  uint64_t num_live_blocks;
  uint64_t num_cached_blocks;
} rt_memory_stats;

/* ---- lifecycle and discovery ---------------------------------------------------- */
/* Discover and load plugins: builtin_dir, then each dir of TORCH_FL_PLUGIN_PATH, then
 * /opt/torch_fl/plugins. Each root holds plugin directories (sorted by name, except
 * that the builtin root lists "host", "opencl", "cuda" first). Idempotent. */
int rt_init(const char* builtin_dir);
/* The system plugin root: $TORCH_FL_SYSTEM_PLUGIN_DIR when set and non-empty, else
 * /opt/torch_fl/plugins. The one place that path is spelled. */
const char* rt_system_plugin_root(void);
/* Re-scan the same roots: load new plugins, retry MISSING_DEPS ones, mark plugins whose
 * directory vanished as GONE (their devices become not present). Existing device
 * indices never change. */
int rt_rescan(void);
/* While a plugin loads (library constructor, init(), device_count()), keep its directory in
 * the file `path` ("" = none), removed when it is done: a file left behind names the plugin
 * that killed the process. Fatal signals meanwhile print a line naming the plugin. */
int rt_set_init_marker(const char* path);
/* 0 when `path` and every folder above it may be trusted (include/ral_trust.h: owned by
 * root or this user, writable by nobody else); 1 otherwise, with the reason ("world-writable
 * <path>") in why (cap bytes). exact_owner=1: the path itself must belong to this user, as a
 * cache must; -1 for a NULL argument. For code loaded from disk outside the runtime (the C++ device guard's build
 * cache), so that every such check is the same check. */
int rt_trust_path(const char* path, int32_t exact_owner, char* why, uint64_t cap);
int rt_plugin_count(void);
int rt_plugin_get(int32_t plugin, rt_plugin_record* out);
/* Number of visible devices (after TORCH_FL_VISIBLE_DEVICES, e.g. "1,0"). */
int rt_device_count(void);
int rt_device_get(int32_t device, rt_device_record* out);
/* Thread-local description of the last failure on this thread. */
const char* rt_last_error(void);

/* ---- kernels ----------------------------------------------------------------- */
/* Resolve a kernel symbol of the plugin that drives `device`. Writes an opaque handle
 * (>0) usable with rt_launch; RAL_ERROR_UNSUPPORTED if the plugin lacks the symbol. */
int rt_kernel_lookup(int32_t device, const char* symbol, int64_t* handle);
/* Compile source for a device through the plugin's optional compile entry and
 * resolve `kernel_name` in it. RAL_ERROR_UNSUPPORTED if the plugin cannot compile. */
int rt_kernel_compile(int32_t device, const char* lang, const char* source,
                      const char* options, const char* kernel_name, int64_t* handle);

/*
 * Launch a kernel. `packed` encodes the call compactly, to keep Python's cost low:
 *   [n_outputs, n_inputs, n_scalars,
 *    per tensor (outputs first): ptr, byte_offset, dtype, ndim, sizes[ndim], strides[ndim],
 *    per scalar: tag, then
 *       NONE: nothing | INT/BOOL/DTYPE: value | FLOAT: index into `floats` |
 *       INT_LIST: count, values[count] | STRING: index into `strings`]
 * An absent optional tensor is ptr 0, offset 0, dtype RAL_DTYPE_COUNT, ndim 0.
 * Every present tensor is checked by the SecureContext (ptr is a live allocation of
 * `device`, offset+extent inside it) before the plugin is called.
 */
int rt_launch(int32_t device, int32_t stream, int64_t kernel, const int64_t* packed,
              int32_t n_packed, const double* floats, const char* const* strings,
              const char* op_name);

/* ---- memory (MemoryPool + SecureContext) ------------------------------------------ */
/* Allocate nbytes (0 allowed: returns a valid minimal block) for use on `stream`. */
int rt_malloc(int32_t device, uint64_t nbytes, int32_t stream, uint64_t* ptr);
/* Return a block to the pool. Reused by the same stream at once (stream order makes
 * that safe); by other streams only after the work queued before the free completes. */
int rt_free(int32_t device, uint64_t ptr);
/* Mark the live block at `ptr` (an rt_malloc result) as used by `stream` too, as
 * torch's Tensor.record_stream does: once freed, the block is not reused by any stream
 * until `stream` has finished the work queued on it. */
int rt_record_stream(int32_t device, uint64_t ptr, int32_t stream);
/* Check that [ptr+offset, ptr+offset+nbytes) lies in a live allocation of `device`. */
int rt_check_pointer(int32_t device, uint64_t ptr, uint64_t offset, uint64_t nbytes);
/* Copy the pool statistics (named _get: rt_memory_stats is the struct type). */
int rt_memory_stats_get(int32_t device, rt_memory_stats* out);
int rt_reset_peak_stats(int32_t device);
/* Zero the cumulative counters (allocs, frees, cache hits, plugin calls, OOMs). */
int rt_reset_accumulated_stats(int32_t device);
/* Synchronize the device and hand every cached block back to the plugin. */
int rt_empty_cache(int32_t device);
/* Set the per-device limit in bytes (0 = none). TORCH_FL_MEMORY_LIMIT sets the initial
 * limit for every device ("512MB", "2GiB", "1048576"). */
int rt_set_memory_limit(int32_t device, uint64_t limit_bytes);
/* Parse a size the way TORCH_FL_MEMORY_LIMIT is read: a number with an optional unit,
 * case-insensitive; K/KiB/M/MiB/G/GiB/T/TiB are powers of 1024, kB/MB/GB/TB of 1000. */
int rt_parse_size(const char* text, uint64_t* bytes);
/* For host-mappable devices: the host address of ptr+offset (validated), else
 * RAL_ERROR_UNSUPPORTED. */
int rt_host_address(int32_t device, uint64_t ptr, uint64_t offset, uint64_t nbytes,
                    uint64_t* host_addr);

/* ---- copies (all validated) -------------------------------------------------------- */
int rt_copy_h2d(int32_t device, int32_t stream, uint64_t dst, uint64_t dst_offset,
                const void* src, uint64_t nbytes);
/* Device -> host; the data is in dst once `stream` is synchronized (or sync != 0). */
int rt_copy_d2h(int32_t device, int32_t stream, void* dst, uint64_t src, uint64_t src_offset,
                uint64_t nbytes, int32_t sync);
/* Device -> device. Same device: ordered on `stream`. Different devices (even different
 * plugins): the runtime stages through host memory and synchronizes both sides. */
int rt_copy_d2d(int32_t dst_device, uint64_t dst, uint64_t dst_offset, int32_t src_device,
                uint64_t src, uint64_t src_offset, uint64_t nbytes, int32_t stream);
int rt_memset(int32_t device, int32_t stream, uint64_t dst, uint64_t offset, int32_t value,
              uint64_t nbytes);

/* ---- streams and events (AsyncStream) ------------------------------------------- */
/* Every function here is safe to call from any thread at any time. Destroying a stream
 * or event only closes its id: work already queued still completes, calls already using
 * it finish normally, and the plugin handle is freed after the last of them (see the
 * threading contract in ral_plugin.h and torch_fl/_native/README.md). */
int rt_stream_create(int32_t device, int32_t* stream);
int rt_stream_destroy(int32_t device, int32_t stream);
/* Wait for the stream; returns the first asynchronous error since the last sync, with a
 * message naming the plugin and the op that failed. */
int rt_stream_synchronize(int32_t device, int32_t stream);
int rt_stream_query(int32_t device, int32_t stream);
/* Synchronize every stream of the device. */
int rt_device_synchronize(int32_t device);
int rt_event_create(int32_t device, int32_t* event);
int rt_event_destroy(int32_t device, int32_t event);
int rt_event_record(int32_t device, int32_t event, int32_t stream);
int rt_event_synchronize(int32_t device, int32_t event);
int rt_event_query(int32_t device, int32_t event);
int rt_stream_wait_event(int32_t device, int32_t stream, int32_t event);
int rt_event_elapsed_ms(int32_t device, int32_t start, int32_t end, float* ms);
/* The calling thread's current stream of a device (0, the default stream, until set), as
 * CUDA's per-thread current stream: torch_fl issues the thread's ops there, and PyTorch's
 * device guard reads and switches it (the autograd engine runs each backward op on the
 * stream of its forward op). Not validated: a destroyed id fails at its next use. */
int32_t rt_current_stream(int32_t device);
int rt_set_current_stream(int32_t device, int32_t stream);
/* The calling thread's current device (0 until set), as CUDA's per-thread current device: the
 * one store that PyTorch's device guard (torch.accelerator.set_device_index, the autograd
 * engine's device threads) and torch.ral.set_device both read and write. Not validated here:
 * callers check the index against rt_device_count when the user sets it. */
int32_t rt_current_device(void);
void rt_set_current_device(int32_t device);

/* Hang timeout of every wait on a plugin (stream/event/device synchronize, synchronous
 * copies), in seconds; 0 waits forever. Initially $TORCH_FL_DEVICE_TIMEOUT, else 300.
 * A wait that runs past it fails with RAL_ERROR_DEVICE_HANG and marks its device lost. */
int rt_set_device_timeout(double seconds);
double rt_device_timeout(void);

/* ---- observation -------------------------------------------------------------- */
/* Number of calls that reached the plugins' launch entry for this device (a failed
 * SecureContext check does not count). */
uint64_t rt_launch_count(int32_t device);

#endif /* RAL_RUNTIME_H */
