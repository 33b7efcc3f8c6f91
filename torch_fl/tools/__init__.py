"""Command-line tools: `ralctl` (plugins, devices, manifests, doctor) and `ral-trace` (record, report).

Nothing here imports torch at module level except the trace recorder; see README.md.
"""
