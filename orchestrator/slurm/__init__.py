"""Slurm clusters, reached through their login nodes (ordinary SSH hosts).

- ``facts``: what a login node says about its cluster (Slurm version, partitions and their GPU
  gres, whether a job would be accepted), each fact an argv and a pure parser; `orch hosts
  check` reports them.
- ``jobs``: Slurm's client commands as data (sbatch, squeue, scontrol, scancel argv and their
  parsed output) and the fixed job script.
- ``allocation``: batch jobs asked of the scheduler for runs, waited for and released.

No user value is ever part of a shell string here: every command is an argv list.
"""
