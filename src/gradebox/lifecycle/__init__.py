"""One test's run, and the seam that runs many: ``testrun`` (a test's workspace, hooks,
target or reference, diff, graders and result inside a ``SuiteContext``), ``steps`` and
``host_targets`` (the target and hooks), ``conversation`` and ``repeat``, ``llm_runtime``
(what an LLM grader of one test gets from its run), ``pool`` (the warm pool, the
interruptible map), ``jobs`` (what to run, as plain data, and ``run_job``) and ``executor``
(``Executor`` and ``LocalExecutor``: jobs in, results out).

May import: core, protocol, engine, images, files, sandbox, llm, graders, suite.
"""
