"""Known ModuleInfo conformance failures: "[<dev>/]<style or *>:<module>:<dtype>" -> reason.

Reviewed against a full sweep (`pytest tests/test_module_db.py -m slow`); test_module_db fails
if an entry starts passing, so the list stays true. "tracked:" entries are bugs another branch
fixes; remove them when it merges.
"""

XFAIL: dict[str, str] = {}
