"""Faults under load and the soak: the shared harness and `make soak`."""
