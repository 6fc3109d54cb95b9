"""Pure checking maths: arrays in, verdicts or mismatches out. No I/O, no device choice, no clock."""
