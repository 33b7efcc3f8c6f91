/* cl_api.c -- resolve the OpenCL entry points from the ICD loader at run time. */
#define _GNU_SOURCE
#include "cl_api.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

ocl_cl_api CL;
static void* g_lib;

int ocl_cl_load(void) {
  if (g_lib) return RAL_OK;
  /* TORCH_FL_OPENCL_LIBRARY names a non-standard loader (and lets tests hide it). */
  const char* name = getenv("TORCH_FL_OPENCL_LIBRARY");
  if (!name || !name[0]) name = "libOpenCL.so.1";
  /* RTLD_LOCAL: vendor symbols must not leak into the process's namespace. */
  g_lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    const char* why = dlerror();
    return ocl_error(RAL_ERROR_MISSING_DEPS, "%s not found (%s); install the OpenCL ICD loader (ocl-icd-libopencl1)",
                     name, why ? why : "dlopen failed");
  }
#define OCL_RESOLVE(ret, name, params)                                                     \
  *(void**)&CL.name = dlsym(g_lib, #name);                                                 \
  if (!CL.name) {                                                                          \
    ocl_cl_unload();                                                                       \
    return ocl_error(RAL_ERROR_MISSING_DEPS, "libOpenCL.so.1 lacks %s (an OpenCL 1.2 loader is needed)", #name); \
  }
  OCL_CL_FUNCTIONS(OCL_RESOLVE)
#undef OCL_RESOLVE
  return RAL_OK;
}

void ocl_cl_unload(void) {
  if (g_lib) dlclose(g_lib);
  g_lib = NULL;
  memset(&CL, 0, sizeof CL);
}

const char* ocl_cl_error_name(cl_int err) {
  switch (err) {
#define N(x) \
  case x:    \
    return #x;
    N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE) N(CL_COMPILER_NOT_AVAILABLE)
    N(CL_MEM_OBJECT_ALLOCATION_FAILURE) N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
    N(CL_PROFILING_INFO_NOT_AVAILABLE) N(CL_BUILD_PROGRAM_FAILURE) N(CL_INVALID_VALUE)
    N(CL_INVALID_DEVICE) N(CL_INVALID_CONTEXT) N(CL_INVALID_COMMAND_QUEUE)
    N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_BINARY) N(CL_INVALID_BUILD_OPTIONS)
    N(CL_INVALID_PROGRAM) N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME)
    N(CL_INVALID_KERNEL) N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
    N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE)
    N(CL_INVALID_WORK_ITEM_SIZE) N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT)
    N(CL_INVALID_OPERATION) N(CL_INVALID_BUFFER_SIZE) N(CL_INVALID_GLOBAL_WORK_SIZE)
    N(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
#undef N
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "CL_UNKNOWN_ERROR";
  }
}
