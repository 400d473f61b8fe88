"""Sources: a source's config, the files its patterns name, object-store URIs, and the formats readers register.

The pipeline imports this package; it imports no reader (readers import it, and are found by name) and, of the
pipeline, only the config base classes.
"""
