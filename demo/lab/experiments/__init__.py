"""Experiments on the world's models: measurements that shaped the recipe, not part of it.

Contract: each module is a command (`python -m demo.lab.experiments.NAME`) that ends with one
JSON line, and its parsing and tallies are tested in tests/test_world.py. The training recipe
(`demo.lab.training.train` and what it imports) never imports this package; these modules may import
anything in `demo.world`. What each one found, and the lab notes behind the recipe's choices,
are in docs/world-experiments.md.
- `lookup`: how the target picks the asked object in its image tokens (teacher-forced argmax at
  the looked-up word, by name or by place, and with a gap of unused positions after the image).
- `recall`: whether a fresh small LM learns associative recall from the slots ("circle is red.").
- `diagnose`: where the target's long answers go wrong (captions item by item, multiple choice's
  checks, descriptions' fluency, copying from the context).
"""
