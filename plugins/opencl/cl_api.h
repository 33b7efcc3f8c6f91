/*
 * cl_api.h -- the OpenCL 1.2 entry points the plugin uses, resolved from libOpenCL.so.1
 * with dlsym at init. We never link -lOpenCL: the plugin must load (and report
 * MISSING_DEPS) on machines without the ICD loader.
 */
#ifndef OCL_CL_API_H
#define OCL_CL_API_H

#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

/* X(return type, name, parameter list) for every cl* function we call. */
#define OCL_CL_FUNCTIONS(X)                                                                     \
  X(cl_int, clGetPlatformIDs, (cl_uint, cl_platform_id*, cl_uint*))                            \
  X(cl_int, clGetPlatformInfo, (cl_platform_id, cl_platform_info, size_t, void*, size_t*))     \
  X(cl_int, clGetDeviceIDs, (cl_platform_id, cl_device_type, cl_uint, cl_device_id*, cl_uint*)) \
  X(cl_int, clGetDeviceInfo, (cl_device_id, cl_device_info, size_t, void*, size_t*))           \
  X(cl_context, clCreateContext,                                                                \
    (const cl_context_properties*, cl_uint, const cl_device_id*,                                \
     void(CL_CALLBACK*)(const char*, const void*, size_t, void*), void*, cl_int*))             \
  X(cl_int, clReleaseContext, (cl_context))                                                     \
  X(cl_command_queue, clCreateCommandQueue,                                                     \
    (cl_context, cl_device_id, cl_command_queue_properties, cl_int*))                           \
  X(cl_int, clReleaseCommandQueue, (cl_command_queue))                                          \
  X(cl_int, clFinish, (cl_command_queue))                                                       \
  X(cl_int, clFlush, (cl_command_queue))                                                        \
  X(cl_mem, clCreateBuffer, (cl_context, cl_mem_flags, size_t, void*, cl_int*))                \
  X(cl_int, clReleaseMemObject, (cl_mem))                                                       \
  X(cl_int, clGetMemObjectInfo, (cl_mem, cl_mem_info, size_t, void*, size_t*))                 \
  X(cl_int, clSetMemObjectDestructorCallback,                                                   \
    (cl_mem, void(CL_CALLBACK*)(cl_mem, void*), void*))                                         \
  X(cl_int, clEnqueueReadBuffer,                                                                \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint, const cl_event*,         \
     cl_event*))                                                                                \
  X(cl_int, clEnqueueWriteBuffer,                                                               \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint, const cl_event*,   \
     cl_event*))                                                                                \
  X(cl_int, clEnqueueCopyBuffer,                                                                \
    (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event*,        \
     cl_event*))                                                                                \
  X(cl_int, clEnqueueFillBuffer,                                                                \
    (cl_command_queue, cl_mem, const void*, size_t, size_t, size_t, cl_uint, const cl_event*,   \
     cl_event*))                                                                                \
  X(cl_int, clEnqueueMarkerWithWaitList, (cl_command_queue, cl_uint, const cl_event*, cl_event*)) \
  X(cl_int, clEnqueueBarrierWithWaitList, (cl_command_queue, cl_uint, const cl_event*, cl_event*)) \
  X(cl_int, clWaitForEvents, (cl_uint, const cl_event*))                                        \
  X(cl_int, clGetEventInfo, (cl_event, cl_event_info, size_t, void*, size_t*))                 \
  X(cl_int, clGetEventProfilingInfo, (cl_event, cl_profiling_info, size_t, void*, size_t*))    \
  X(cl_int, clSetEventCallback,                                                                 \
    (cl_event, cl_int, void(CL_CALLBACK*)(cl_event, cl_int, void*), void*))                     \
  X(cl_int, clReleaseEvent, (cl_event))                                                         \
  X(cl_event, clCreateUserEvent, (cl_context, cl_int*))                                         \
  X(cl_int, clSetUserEventStatus, (cl_event, cl_int))                                           \
  X(cl_int, clRetainEvent, (cl_event))                                                          \
  X(cl_program, clCreateProgramWithSource,                                                      \
    (cl_context, cl_uint, const char**, const size_t*, cl_int*))                                \
  X(cl_program, clCreateProgramWithBinary,                                                      \
    (cl_context, cl_uint, const cl_device_id*, const size_t*, const unsigned char**, cl_int*,    \
     cl_int*))                                                                                  \
  X(cl_int, clBuildProgram,                                                                     \
    (cl_program, cl_uint, const cl_device_id*, const char*,                                     \
     void(CL_CALLBACK*)(cl_program, void*), void*))                                             \
  X(cl_int, clGetProgramInfo, (cl_program, cl_program_info, size_t, void*, size_t*))           \
  X(cl_int, clGetProgramBuildInfo,                                                              \
    (cl_program, cl_device_id, cl_program_build_info, size_t, void*, size_t*))                  \
  X(cl_int, clReleaseProgram, (cl_program))                                                     \
  X(cl_kernel, clCreateKernel, (cl_program, const char*, cl_int*))                              \
  X(cl_int, clReleaseKernel, (cl_kernel))                                                       \
  X(cl_int, clSetKernelArg, (cl_kernel, cl_uint, size_t, const void*))                          \
  X(cl_int, clGetKernelInfo, (cl_kernel, cl_kernel_info, size_t, void*, size_t*))             \
  X(cl_int, clGetKernelWorkGroupInfo,                                                           \
    (cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void*, size_t*))               \
  X(cl_int, clEnqueueNDRangeKernel,                                                             \
    (cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*,          \
     cl_uint, const cl_event*, cl_event*))

#define OCL_CL_FIELD(ret, name, params) ret(CL_API_CALL* name) params;
/*! Every resolved cl* entry; valid between a successful ocl_cl_load and ocl_cl_unload. */
typedef struct {
  OCL_CL_FUNCTIONS(OCL_CL_FIELD)
} ocl_cl_api;
#undef OCL_CL_FIELD

extern ocl_cl_api CL;

/*! dlopen libOpenCL.so.1 and resolve every entry; RAL_ERROR_MISSING_DEPS with a message if not. */
int ocl_cl_load(void);
/*! dlclose the ICD loader so that a later init re-reads OCL_ICD_VENDORS (hot plug). */
void ocl_cl_unload(void);
/*! Symbolic name of an OpenCL error code ("CL_OUT_OF_RESOURCES"). */
const char* ocl_cl_error_name(cl_int err);

#endif /* OCL_CL_API_H */
