"""`python -m demo.bench`: the paper-style benchmark (demo.bench.benchmark)."""

from demo.bench.benchmark import main

main()
