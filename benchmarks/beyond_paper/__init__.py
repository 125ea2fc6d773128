"""Beyond the paper: Bayes-optimal stopping, loss cap, history warm-start, predictive selection, token cost."""
