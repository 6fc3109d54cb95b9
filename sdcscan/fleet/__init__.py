"""The fleet side: many hosts' reports in, findings out (`sdcscan compare`, goldens). Torch-free."""
