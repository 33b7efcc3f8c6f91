/* null_entry.c -- a REQUIRED entry (event_query) is NULL: LOAD_FAILED naming it. */
#include "common.h"

static void customize(ral_plugin_api* api) { api->event_query = NULL; }
