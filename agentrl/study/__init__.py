"""Studies: comparisons of training runs planned in a file, run and resumed by one tool, reported with
pre-named statistics (`agentrl study`, docs/studies.md).

- `spec`: `studies/<name>/study.yaml` as a typed, checked `StudySpec`, and its hash.
- `runner`: plan, run (resuming from disk), status; the layout of a study's folder.
- `stats`: bands over seeds, paired differences, steps to a threshold with censoring.
- `report`: the summary JSON, the table a page includes, the learning-curve plot.
"""
