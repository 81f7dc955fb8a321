"""Code that runs on the GPU hosts, shipped as the top-level package ``orch_remote`` in a zipapp.

Standard library only and Python 3.9+, because it runs in whatever interpreter the engine's
virtual environment has; relative imports only, because the package is renamed when bundled.
"""
