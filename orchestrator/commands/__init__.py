"""One module per command (run, hosts check, ps/stop, doctor, logs, report).

Each exposes a typed function returning a typed outcome and prints nothing: ``cli/`` parses
arguments, calls it, renders the outcome and picks the exit code. Nothing here imports ``cli/``
or rich. ``fanout`` and ``progress`` import only the standard library, config and errors, so
that ``runner/`` (which the ``run`` command drives) can use them without an import cycle; this
``__init__`` therefore imports none of the command modules.
"""
