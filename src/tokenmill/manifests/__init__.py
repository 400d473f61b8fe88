"""Stage manifests: what each stage read, kept and dropped, with proof that nothing was lost."""
