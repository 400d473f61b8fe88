"""Model-based quality: train fastText classifiers on positives and negatives, and score texts with them."""
