/* older_minor.c -- an "older minor" table that ends before the optional entries. The
 * memory past struct_size holds poison: a runtime that reads it would call garbage. */
#include "common.h"

#define POISON ((uintptr_t)0x10)

static void customize(ral_plugin_api* api) {
  api->struct_size = offsetof(ral_plugin_api, last_error);
  api->last_error = (const char* (*)(void))POISON;
  api->memset = (ral_status(*)(int32_t, void*, uint64_t, int32_t, uint64_t, ral_stream))POISON;
  api->compile = (ral_status(*)(int32_t, const char*, const char*, const char*, ral_module*))POISON;
  api->module_get_kernel = (ral_status(*)(ral_module, const char*, ral_kernel_fn*))POISON;
  api->module_destroy = (ral_status(*)(ral_module))POISON;
}
