"""The clean chain's filters, one module each: a module that defines a `Filter` with an `order` adds it to the chain."""
