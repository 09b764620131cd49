"""What a run looks like to people: the terminal table and JUnit (``terminal``), the one-file
HTML report (``html``) and the live view (``view``). Each reads the run through
``gradebox.results``; machines get ``--json`` instead. ``plain``: one grader's result
(``gradebox grade``), rich only on a terminal.

May import: core, protocol, engine, images, files, sandbox, llm, graders, suite,
lifecycle, drivers.
"""

from __future__ import annotations

from ..core.lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: `gradebox grade`'s lean path imports report.plain
if TYPE_CHECKING:
    from .plain import print_result
    from .terminal import STYLE, escape, junit_xml, print_run, xml_text

__all__ = ["STYLE", "escape", "junit_xml", "print_result", "print_run", "xml_text"]


# Each name is imported on first use: `report.plain` must not load rich and pydantic.
__getattr__ = lazy_exports(
    __name__,
    {
        "plain": ("print_result",),
        "terminal": ("STYLE", "escape", "junit_xml", "print_run", "xml_text"),
    },
)
