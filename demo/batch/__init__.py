"""The Analysis tab's work over a dataset, on Ray Data: `python -m demo.batch --help`, docs/batch.md.

    inputs    the examples, read with the `datasets` library: the embedded world's held-out
              examples, an imagefolder folder (images + metadata.jsonl), or a Parquet file
    worker    the actor Ray Data runs once per worker: the preset's models loaded once, each
              example decoded through the session layer (`demo.session.analysis.decode_examples`)
    columns   a decoded example as rows: tokens, examples (SGLang's and vLLM's metric names), errors
    run       Ray started or joined, the examples mapped, parts committed as they finish (a killed
              run resumes), the four files and the manifest written at the end
    report    report.html: the Analysis tab's charts over the batch, counts and 95% intervals

Never imported by the app (Ray is not among its requirements: requirements-batch.txt).
"""
