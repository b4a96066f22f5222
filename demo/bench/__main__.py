"""`python -m demo.bench`: the paper-style benchmark (demo.bench.benchmark); with `--languages`,
the second seed's table per language and drafter (demo.bench.per_language)."""

import sys

if any(a == "--languages" or a.startswith("--languages=") for a in sys.argv[1:]):
    from demo.bench.per_language import main
else:
    from demo.bench.benchmark import main

main()
