"""`tokenmill ablate`: which data recipe makes the better model, decided by proxy runs with intervals over seeds."""
