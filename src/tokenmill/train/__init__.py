"""Training: the OPT-style decoder model, and the loop that trains it on tokenmill token files."""
