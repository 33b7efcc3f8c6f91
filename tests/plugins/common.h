/* common.h -- every test plugin is the template plugin with one thing changed.
 * build.py compiles a case file with -I plugins/template
 * -Dral_plugin_entry_v1=template_entry_v1 -DTEST_PLUGIN_NAME='"<name>"': the template's
 * own entry is renamed, and the case exports the real entry, which hands the runtime
 * a copy of the template's table after customize() has edited it. */

#include "template.c" /* first: it sets _POSIX_C_SOURCE */

#undef ral_plugin_entry_v1

static ral_plugin_api g_test_api;

/* The case-specific change to the template's table. */
static void customize(ral_plugin_api* api);

RAL_PLUGIN_EXPORT const ral_plugin_api* ral_plugin_entry_v1(uint16_t major, uint16_t minor) {
  g_test_api = *template_entry_v1(major, minor);
  g_test_api.plugin_name = TEST_PLUGIN_NAME;
  customize(&g_test_api);
  return &g_test_api;
}
