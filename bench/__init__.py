"""raytide benchmarks: ``python -m bench NAME [--repeat N]`` prints medians and ratios, writes JSON."""
