"""One module per graph node; each exposes ``make_<node>(deps)`` returning the node function."""
