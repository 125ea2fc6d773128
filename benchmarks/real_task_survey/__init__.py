"""The real-training task: the GPU survey it was chosen from, its report and its replay bank."""
