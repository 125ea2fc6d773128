"""The README's headline table and figure, recomputed from the other studies' result files."""
