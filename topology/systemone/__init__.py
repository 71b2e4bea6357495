"""System One: typed questions answered with probabilities, asked in batches."""
