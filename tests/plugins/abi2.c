/* abi2.c -- claims ABI 2.0: the runtime must refuse it with ABI_MISMATCH. */
#include "common.h"

static void customize(ral_plugin_api* api) {
  api->abi_major = 2;
  api->abi_minor = 0;
}
