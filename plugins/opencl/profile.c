/*
 * profile.c -- optional per-kernel timing for tuning: with TORCH_FL_OPENCL_PROFILE=<file>
 * every kernel enqueue asks for an event, and each stream synchronization appends one line
 * per finished kernel to <file> (name, global/local sizes, queued->start and start->end in
 * microseconds). Off (no events, no cost beyond one cached getenv) when the variable is
 * unset; a file that cannot be opened turns it off silently (plugins never print).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

#define PROF_MAX 65536

typedef struct {
  cl_event ev;
  char name[40];
  size_t g[3], l[3];
  cl_uint dims;
} prof_rec;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_on = -1; /* -1: not yet read */
static FILE* g_file;
static prof_rec* g_recs;
static int g_n;

int ocl_profile_on(void) {
  int on = __atomic_load_n(&g_on, __ATOMIC_ACQUIRE);
  if (on >= 0) return on;
  pthread_mutex_lock(&g_mu);
  if (g_on < 0) {
    const char* path = getenv("TORCH_FL_OPENCL_PROFILE");
    if (path && *path) {
      g_file = fopen(path, "a");
      g_recs = g_file ? calloc(PROF_MAX, sizeof *g_recs) : NULL;
      if (g_file && !g_recs) fclose(g_file), g_file = NULL;
    }
    __atomic_store_n(&g_on, g_file ? 1 : 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_mu);
  return g_on;
}

void ocl_profile_add(cl_event ev, cl_kernel k, cl_uint dims, const size_t* g, const size_t* l) {
  pthread_mutex_lock(&g_mu);
  if (g_n >= PROF_MAX) {
    pthread_mutex_unlock(&g_mu);
    CL.clReleaseEvent(ev);
    return;
  }
  prof_rec* r = &g_recs[g_n++];
  memset(r, 0, sizeof *r);
  r->ev = ev;
  r->dims = dims;
  for (cl_uint i = 0; i < dims && i < 3; i++) r->g[i] = g[i], r->l[i] = l ? l[i] : 0;
  if (CL.clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof r->name - 1, r->name, NULL) != CL_SUCCESS)
    strcpy(r->name, "?");
  pthread_mutex_unlock(&g_mu);
}

void ocl_profile_flush(void) {
  if (ocl_profile_on() != 1) return;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_n; i++) {
    prof_rec* r = &g_recs[i];
    cl_ulong q = 0, s = 0, e = 0;
    CL.clWaitForEvents(1, &r->ev);
    CL.clGetEventProfilingInfo(r->ev, CL_PROFILING_COMMAND_QUEUED, sizeof q, &q, NULL);
    CL.clGetEventProfilingInfo(r->ev, CL_PROFILING_COMMAND_START, sizeof s, &s, NULL);
    CL.clGetEventProfilingInfo(r->ev, CL_PROFILING_COMMAND_END, sizeof e, &e, NULL);
    fprintf(g_file, "%s\t%zux%zux%zu\t%zux%zux%zu\t%.1f\t%.1f\t%llu\n", r->name, r->g[0], r->g[1], r->g[2],
            r->l[0], r->l[1], r->l[2], (double)(s - q) / 1e3, (double)(e - s) / 1e3, (unsigned long long)s);
    CL.clReleaseEvent(r->ev);
  }
  g_n = 0;
  fflush(g_file);
  pthread_mutex_unlock(&g_mu);
}
