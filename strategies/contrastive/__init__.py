"""The contrastive family: expert minus amateur under a plausibility constraint (Li et al.)."""
