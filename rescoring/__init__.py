"""Re-scoring stored steps with a checkpoint's weights: rescore, swap, audit."""
