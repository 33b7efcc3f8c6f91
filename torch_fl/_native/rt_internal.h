/* rt_internal.h -- state shared by the runtime's translation units. Never installed;
 * Python sees only ral_runtime.h. */
#ifndef RT_INTERNAL_H
#define RT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ral_runtime.h"
#include "u64map.h"

#define RT_MAX_PLUGINS 256
#define RT_MAX_DEVICES 1024
#define RT_PATH_MAX 1024
/* Sizes below this are rounded to 512 bytes; above, to 2 MiB multiples. */
#define RT_SMALL_LIMIT (1u << 20)
#define RT_SMALL_STEP 512u
#define RT_LARGE_STEP (2u << 20)
#define RT_SMALL_CLASSES (RT_SMALL_LIMIT / RT_SMALL_STEP)
/* Checked mode (TORCH_FL_CHECKED=1): guard bytes after every allocation of a
 * host-mappable device, filled with RT_GUARD_BYTE and checked after each launch. */
#define RT_GUARD_BYTES 256u
#define RT_GUARD_BYTE 0xA5

/* ---- plugins (loader.c) ---- */
typedef struct rt_plugin {
  rt_plugin_record rec; /* written under g_rt.lock only */
  void* dl;             /* dlopen handle while LOADED (or GONE: never closed) */
  ral_plugin_api api;   /* the plugin's table, zero past its struct_size */
  int32_t index;        /* position in g_rt.plugins (rt_plugin_get) */
  int32_t seen;         /* scan generation that last found the directory */
} rt_plugin;

/* ---- memory pool (memory_pool.c) ---- */
#define RT_BLOCK_USES 4
#define RT_BLOCK_USES_ALL (-1)
typedef struct rt_block {
  uint64_t ptr;
  uint64_t size;      /* size class: bytes held from the plugin */
  uint64_t requested; /* bytes the caller asked for: the SecureContext extent */
  int32_t stream;     /* stream that last used it (stream-ordered reuse) */
  /* Other streams the block was used on (rt_record_stream): a freed block is reused only
   * once each of them is idle. n_uses is RT_BLOCK_USES_ALL when more were recorded than
   * fit: then every stream of the device must be idle. */
  int32_t n_uses;
  int32_t uses[RT_BLOCK_USES];
  struct rt_block* next;
} rt_block;

typedef struct {
  rt_block* small[RT_SMALL_CLASSES]; /* cached blocks by class index */
  u64map large;                      /* class size -> cached list head */
  rt_block* spare;                   /* recycled block records */
  u64map held;                       /* every pointer held from the plugin (live or cached) */
  rt_memory_stats stats;
} rt_pool;

/* ---- streams and events (streams.c) ---- */
/* A slot's plugin handle stays valid from rt_stream_acquire_locked until the matching
 * rt_stream_release: destroy only marks the slot closing, and whoever drops the last
 * reference synchronizes the stream and frees the handle (under dev->lock), so no call
 * ever uses a freed handle and the id is not reused before then. */
enum { RT_OPEN = 0, RT_CLOSING = 1, RT_FINISHING = 2 };
typedef struct {
  ral_stream handle;
  int32_t in_use;  /* slot holds a plugin stream (possibly closing) */
  int32_t closing; /* RT_OPEN, RT_CLOSING (destroyed, still referenced), RT_FINISHING */
  int32_t refs;    /* calls between acquire and release */
  int32_t pending_status; /* async error found by an internal sync, returned later */
  char* pending_msg;
} rt_stream_slot;

typedef struct {
  ral_event handle;
  int32_t next_free; /* free-list link while unused, -1 while in use */
  int32_t closing;   /* as for streams */
  int32_t refs;
  int32_t waited;    /* some stream waited on it: those streams finish before the free */
} rt_event_slot;

/* ---- devices (device_manager.c) ---- */
typedef struct rt_device {
  rt_plugin* plugin;
  int32_t local;  /* plugin-local index */
  int32_t global; /* visible index (for messages), -1 if hidden */
  atomic_int present;
  ral_device_info info;
  pthread_mutex_t lock; /* guards everything below */
  rt_pool pool;
  u64map live; /* SecureContext: ptr -> rt_block of live allocations */
  rt_stream_slot* streams;
  int32_t n_streams, cap_streams;
  rt_event_slot* events;
  int32_t n_events, cap_events, free_event;
  int32_t n_finishing;       /* streams being synchronized before their free */
  pthread_cond_t finished_cv; /* broadcast when one of those is freed */
  atomic_uint_fast64_t launches;
  /* Set once a wait on the device timed out (watchdog.c): from then on the runtime never
   * calls this device's plugin entries again and every use fails naming lost_reason. */
  atomic_int hung;
  char lost_reason[512];
} rt_device;

typedef struct {
  pthread_mutex_t lock; /* loader, rescan, kernel table writes */
  int initialized;
  int generation;
  char builtin_dir[RT_PATH_MAX];
  rt_plugin* plugins[RT_MAX_PLUGINS];
  atomic_int n_plugins;
  rt_device* phys[RT_MAX_DEVICES];
  int n_phys;
  rt_device* visible[RT_MAX_DEVICES];
  atomic_int n_visible;
  int want[RT_MAX_DEVICES]; /* TORCH_FL_VISIBLE_DEVICES, physical indices */
  int n_want, has_want;
  uint64_t default_limit;
  int checked; /* TORCH_FL_CHECKED=1: guard bytes checked after each launch */
} rt_globals;

extern rt_globals g_rt;

/* errors.c */
/* Record "<STATUS>: <formatted>" as this thread's last error; returns status. */
int rt_fail(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record a plugin failure: "<STATUS>: [<plugin>] <what>: <plugin message>". */
int rt_plugin_fail(const rt_plugin* p, int status, const char* what, ...)
    __attribute__((format(printf, 3, 4)));
/* Bounded copy that always NUL-terminates (NULL copies as ""). */
void rt_copy_str(char* dst, size_t cap, const char* src);
/* Make a saved message (already "<STATUS>: ...") the last error again; returns status. */
int rt_error_restore(int status, const char* message);
/* Append formatted context to this thread's last error. */
void rt_error_append(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* The enum name of a status ("RAL_ERROR_UNKNOWN" for garbage). */
const char* rt_status_name(int status);
/* Parse "512MB", "2GiB", "1048576" into bytes; 0 on success, -1 if malformed. */
int rt_parse_size_str(const char* text, uint64_t* out);

/* loader.c */
/* Walk the discovery roots; load new plugins, retry failed ones, mark vanished as GONE. */
int rt_loader_scan(void);
/* init_marker.c: bracket one plugin's load (marker file, crash message); skip list. */
void rt_marker_enter(const char* plugin_dir);
void rt_marker_leave(void);
int rt_plugin_skipped(const char* plugin_dir);

/* device_manager.c */
/* Resolve a visible, present device or fail with a message. */
int rt_dev_get(int32_t device, rt_device** out);
/* Resolve a visible device even if it is gone (frees, stats). */
int rt_dev_get_any(int32_t device, rt_device** out);
/* Register every device of a freshly loaded plugin. */
int rt_dm_add_plugin_devices(rt_plugin* p, int32_t count);
/* Mark a plugin's devices (not) present after hot unplug / replug. */
void rt_dm_set_present(rt_plugin* p, int present);
/* Parse TORCH_FL_VISIBLE_DEVICES / TORCH_FL_MEMORY_LIMIT into g_rt. */
int rt_dm_read_env(void);

/* memory_pool.c */
/* Initialise a device's pool with the default limit. */
void rt_pool_init(rt_device* dev);

/* Whether checked mode guards this device's allocations (host-mappable devices only). */
int rt_pool_guarded(const rt_device* dev);
/* Checked mode, device lock held: the tensor's allocation still ends in intact guard bytes.
 * Otherwise re-arms them and fails naming the op (KERNEL_FAILED). */
int rt_pool_check_guard_locked(rt_device* dev, const ral_tensor* t, int arg, const char* op_name,
                               const char* symbol);

/* secure_context.c (device lock held) */
/* Check [ptr+offset, +nbytes) lies in a live allocation of dev. */
int rt_sc_check_locked(rt_device* dev, uint64_t ptr, uint64_t offset, uint64_t nbytes);
/* Validate one kernel tensor argument (index `arg` of op_name). */
int rt_sc_check_tensor_locked(rt_device* dev, const ral_tensor* t, int arg, const char* op_name);
/* Byte size of one element of a dtype, 0 for an invalid code. */
uint64_t rt_dtype_size(int32_t dtype);

/* streams.c (device lock held unless the name says otherwise) */
/* Plugin handle of stream id `sid` with a reference taken (the default stream is created
 * on first use); the handle stays valid until rt_stream_release. */
int rt_stream_acquire_locked(rt_device* dev, int32_t sid, ral_stream* out);
/* Drop a reference from rt_stream_acquire_locked; takes dev->lock itself and may wait
 * for a destroyed stream's work before freeing it. */
void rt_stream_release(rt_device* dev, int32_t sid);
/* RAL_OK if stream id `sid` is open (no reference taken). */
int rt_stream_check_locked(rt_device* dev, int32_t sid);
/* 1 when the stream has no pending work (or does not exist any more). */
int rt_stream_idle_locked(rt_device* dev, int32_t sid);
/* Synchronize every stream; async errors are kept for the next user-visible sync. */
void rt_streams_drain_locked(rt_device* dev);
/* Synchronize a plugin stream and turn a failure into a message. */
int rt_stream_sync_handle(rt_device* dev, int32_t sid, ral_stream h);

/* watchdog.c: waits with the hang timeout (any thread, no lock needed) */
/* stream_synchronize of a plugin stream; a failure becomes a message naming the plugin,
 * a timeout RAL_ERROR_DEVICE_HANG with the device marked lost. */
int rt_wait_stream(rt_device* dev, int32_t sid, ral_stream h);
/* event_synchronize, likewise. */
int rt_wait_event(rt_device* dev, int32_t eid, ral_event h);
/* 1 once a wait on the device timed out. */
int rt_device_hung(const rt_device* dev);
/* Fail with DEVICE_LOST naming why a hung device was lost. */
int rt_device_lost_error(rt_device* dev);

/* kernels.c */
typedef struct {
  rt_plugin* plugin;
  ral_kernel_fn fn;
  char* symbol;
} rt_kernel;
/* The kernel for a handle from rt_kernel_lookup/rt_kernel_compile, or NULL. */
const rt_kernel* rt_kernel_get(int64_t handle);

#endif
