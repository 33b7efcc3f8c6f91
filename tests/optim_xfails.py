"""Known OptimizerInfo conformance failures: "[<dev>/]<style or *>:<optimizer>.<input>.<impl>:<dtype>"
-> reason ("*" = both styles; no device = both devices).

Reviewed against a full sweep (`python -m torch_fl.tools.sweep optim`, or
`pytest tests/test_optim_db.py -m slow`); test_optim_db fails if an entry starts passing, so
the list stays true. "tracked:" entries are bugs another branch fixes: remove them when it
merges (the strict check names each one that starts passing).
"""

XFAIL: dict[str, str] = {}
