/* needs_deps.c -- init() reports MISSING_DEPS until RAL_FAKE_DEPS_PRESENT=1 (the
 * "vendor runtime got installed" moment of the rescan test). */
#include "common.h"

static ral_status needs_deps_init(void) {
  const char* present = getenv("RAL_FAKE_DEPS_PRESENT");
  if (!present || strcmp(present, "1") != 0)
    return fail(RAL_ERROR_MISSING_DEPS,
                "libfakevendor.so.1 not found (install the fake vendor runtime, or set "
                "RAL_FAKE_DEPS_PRESENT=1)");
  return tpl_init();
}

static void customize(ral_plugin_api* api) { api->init = needs_deps_init; }
