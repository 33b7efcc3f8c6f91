"""Known OptimizerInfo conformance failures: "[<dev>/]<style or *>:<optimizer>.<input>.<impl>:<dtype>"
-> reason.

Reviewed against a full sweep (`pytest tests/test_optim_db.py -m slow`); test_optim_db fails
if an entry starts passing, so the list stays true. "tracked:" entries are bugs another branch
fixes; remove them when it merges.
"""

XFAIL: dict[str, str] = {}
