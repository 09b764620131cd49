"""Host folders a test works in: the workspace (a fresh copy of the template, its quota, its
overlay) and the baseline (the git snapshot, and ``file_changes``, the diff every grader
reads), both over trees an agent wrote, so through ``core.fstree`` and ``core.untrusted``.

May import: core.
"""
