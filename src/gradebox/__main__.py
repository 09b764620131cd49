"""``python -m gradebox``: the command.

May import: cli.
"""

from .cli import main

main()
