"""Known ModuleInfo conformance failures: "[<dev>/]<style or *>:<module>:<dtype>" -> reason
("*" = both styles; no device = both devices).

Reviewed against a full sweep (`python -m torch_fl.tools.sweep module`, or
`pytest tests/test_module_db.py -m slow`); test_module_db fails if an entry starts passing, so
the list stays true. "tracked:" entries are bugs another branch fixes: remove them when it
merges (the strict check names each one that starts passing).
"""

XFAIL: dict[str, str] = {}
