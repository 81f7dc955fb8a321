"""Sweeps: the load points and repeats measured on one running server, SLO targets and the
search for the highest load that meets them, and the bookkeeping that lets a sweep resume."""
