"""What a run looks like to people: the terminal table and JUnit (``terminal``), the one-file
HTML report (``html``) and the live view (``view``). Each reads the run through
``gradebox.results``; machines get ``--json`` instead.
"""

from __future__ import annotations

from .terminal import STYLE, escape, junit_xml, print_result, print_run, xml_text

__all__ = ["STYLE", "escape", "junit_xml", "print_result", "print_run", "xml_text"]
