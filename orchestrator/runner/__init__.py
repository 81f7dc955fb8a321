"""One run's execution machinery: preflight (probe + doctor), the server, execution, the manifest
and the result. The playbook as a whole is ``orchestrator.commands.run``."""
