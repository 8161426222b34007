"""Changing the parallelism of vertices, as pure functions: which widths a request gives,
how replica states at a cut are laid out for other widths (split and merge by key group),
and a committed snapshot rewritten for another parallelism."""
