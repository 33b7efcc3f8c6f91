/*
 * pool.h -- the host plugin's one thread budget (pool.c; design in README.md).
 *
 * All parallel work of the plugin (elementwise, reductions, norms, BLAS) runs on one pool of
 * budget-1 helper threads plus the calling thread. Work is claimed in chunks from a shared
 * counter, so a helper that the OS has not scheduled yet (the Python thread holds the other
 * core) delays nothing: the caller simply takes more chunks. Helpers spin a few microseconds
 * after a region, then sleep on a condition variable. Only one region runs at a time; a
 * second caller (another stream, a nested call) runs its loop alone, so the plugin never
 * uses more threads than the budget. OpenMP and OpenBLAS see one thread on every thread the
 * plugin owns (their own teams would spin and fight PyTorch's).
 */
#ifndef HOST_POOL_H
#define HOST_POOL_H

#include <stdint.h>

/* body(begin, end, ctx) runs [begin, end) of a loop; chunks never overlap. */
typedef void (*host_range_fn)(int64_t begin, int64_t end, void* ctx);

/*! Runs body over [0, n) in chunks of at least `grain` on the pool (inline when small). */
void host_parallel_for(int64_t n, int64_t grain, host_range_fn body, void* ctx);

/*! The thread budget: TORCH_FL_HOST_THREADS, else the launching thread's OpenMP setting. */
int host_threads(void);

/*! Called from launch on the API caller's thread: follow torch.set_num_threads. */
void host_pool_note_caller(void);

/*! Threads an OpenMP library call may use here: the budget on a stream worker (the pool
 *  idles while it runs; one fewer while the API caller runs, see host_pool_caller_waits),
 *  one thread inline on the caller or on a pool helper. */
int host_pool_team_size(void);

/*! Marks the current thread as one the plugin owns: OpenMP/OpenBLAS run single-threaded. */
void host_pool_own_thread(void);

/*! Called by a stream worker before each kernel: whether more work is queued behind it. */
void host_pool_note_backlog(int more);

/*! host_parallel_for for loops whose grain is a fixed amount of cheap work (elementwise,
 *  generated kernels): with nothing queued behind the kernel and every helper asleep, a loop
 *  under 8 grains runs inline rather than pay a wake-up. Not for GEMM panels, attention
 *  tasks or copy chunks, where one grain unit is heavy. */
void host_parallel_for_light(int64_t n, int64_t grain, host_range_fn body, void* ctx);

/*! Enter/leave a kernel run inline on the API caller's thread: loops stay on that thread. */
int host_inline_enter(void);
void host_inline_leave(int saved);

/*! An API caller begins (1) or ends (0) a blocking wait for a stream. While no caller waits,
 *  regions leave one core of the budget to the caller (the Python thread dispatching the next
 *  ops); a caller that starts to wait brings the helpers into the open region.
 *  TORCH_FL_HOST_YIELD=0 turns this off. */
void host_pool_caller_waits(int begin);

/*! Stops and joins the helpers (plugin shutdown). */
void host_pool_shutdown(void);

#endif /* HOST_POOL_H */
