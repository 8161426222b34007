"""Hand-written baselines that raytide is benchmarked against, measured in the same run.

Every baseline is a plain function that takes its input (a file path or NumPy arrays)
and returns its result; the caller does the timing unless a docstring says otherwise.
Ray baselines expect Ray to be initialised already (``ray.init(num_cpus=2)``) and never
call ``ray.init`` or ``ray.shutdown``; PySpark baselines take a ``SparkSession``.

Modules:

* :mod:`bench.baselines.data`: deterministic input generators (Zipf text, random graphs).
* :mod:`bench.baselines.wordcount_ray`: word count per epoch with Ray actors (+ reference).
* :mod:`bench.baselines.wordcount_pyspark`: the same word count in PySpark.
* :mod:`bench.baselines.mandelbrot_ray`: compute-bound Mandelbrot rows on a Ray actor pool.
* :mod:`bench.baselines.cc_ray`: connected components by label propagation on Ray actors.
* :mod:`bench.baselines.cc_pyspark`: the same connected components in PySpark DataFrames.
"""
