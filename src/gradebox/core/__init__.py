"""The floor everything stands on: small helpers with no notion of graders, suites or
sandboxes. Values users write (durations, sizes), YAML with line numbers, the door for bytes
others wrote (``untrusted``), trees walked by descriptor (``fstree``), files written whole
(``atomic``), JSON Lines, scratch folders, the private cache, ``.gitignore`` rules, and every
environment default (``settings``, read there and nowhere else).

May import: nothing of gradebox's but ``errors`` and ``_version``.
"""
