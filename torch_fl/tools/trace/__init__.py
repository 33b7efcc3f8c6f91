"""The unified trace: record ops, allocations and syncs (recorder), write Chrome trace JSON (chrome),
read it back (load), summarise it (analysis) and render it (report_text, report_html).

Only `recorder` imports torch; the rest serves `ral-trace report` without it.
"""
