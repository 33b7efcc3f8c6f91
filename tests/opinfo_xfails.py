"""Known OpInfo conformance failures: "<style>:<op>:<dtype>" -> reason ("*" = both styles).

Generated from a sweep, then every entry reviewed; keep reasons specific.
"""

XFAIL: dict[str, str] = {}
