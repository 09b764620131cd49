"""What crosses the line between gradebox and a grader, and what a run leaves behind: the
wire models (``models``: the payload, a grader's output, the result), the same formats read
and written without pydantic for ``gradebox grade``'s lean path (``wire``), and a run's
results read back (``results``, the one reader behind every output).

May import: core.
"""
