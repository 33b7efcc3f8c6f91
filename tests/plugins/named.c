/* named.c -- a working plugin under the name given at build time (discovery tests). */
#include "common.h"

static void customize(ral_plugin_api* api) { (void)api; }
