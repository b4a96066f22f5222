"""`python -m demo.lab.bench`: the paper-style benchmark (demo.lab.bench.benchmark); with `--languages`,
the second seed's table per language and drafter (demo.lab.bench.per_language)."""

import sys

if any(a == "--languages" or a.startswith("--languages=") for a in sys.argv[1:]):
    from demo.lab.bench.per_language import main
else:
    from demo.lab.bench.benchmark import main

main()
