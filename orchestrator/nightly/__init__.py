"""Nightly regression sweeps: a history of every night's figures per case and metric, a verdict
per night against the baseline of the nights before it, the change point of a shift, and the
report (``nightly.md``, ``nightly.json``) with its exit status.

- ``cases``: what is compared (``CaseKey``) and what a night may change (``NightAttributes``);
- ``record``: a night's rows from its results folder (``record_night``);
- ``rows``: a line of the history (``HistoryRow``) and its JSON;
- ``history``: the append-only store (``History``, ``results/history/<playbook>.jsonl``);
- ``verdict``: the rules (``Policy``, ``Thresholds``, ``judge_night``, ``settle``, ``replay``);
- ``changepoint``: Apache Otava, optional (``change_points``);
- ``report``: ``NightlyVerdict``, ``render_markdown``, ``write_nightly``;
- ``night``: one night end to end (``judge_results``).

Imported on use: pandas and scipy take a while to import, and most of orch never needs them.
"""
