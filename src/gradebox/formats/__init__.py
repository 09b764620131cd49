"""Other harnesses' suite files, read as they are written and mapped onto our suite model
(``agentv``). ``suite.detect`` tells them apart by shape and ``suite.load_suite`` imports a
reader by the name in ``suite.READERS``, as a sandbox backend is found: a format builds on the
suite, never the reverse.

May import: core, protocol, engine, images, files, sandbox, llm, graders, suite.
"""
