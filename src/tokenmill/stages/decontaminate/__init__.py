"""The decontaminate stage."""
