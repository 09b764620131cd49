"""What a command drives through the executor seam: a suite (``runner``), recorded outputs
(``batch``), trials of one prompt (``trials``) and a calibration sheet (``calibrate``). Each
builds jobs, hands them to an executor and writes what comes back.

May import: core, protocol, engine, images, files, sandbox, llm, graders, suite, lifecycle.
"""
