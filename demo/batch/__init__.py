"""The Analysis tab's work over a dataset, on Ray Data (`python -m demo.batch --help`, docs/batch.md).
Never imported by the app: Ray is in requirements-batch.txt only."""
