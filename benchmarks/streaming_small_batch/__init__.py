"""Streaming at small B on the real-training task's replay bank, CPU time projected."""
