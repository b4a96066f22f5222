"""Experiments on the world's models: measurements that shaped the recipe, not part of it.

More, with its measurements: docs/modules.md.
"""
