"""The driver's side of a job on Ray: ``rt.run`` and the user's :class:`~raytide.driver.job.Job`,
the pool of warm hosts the job leases, its inputs and outputs, and the recovery and rescale
runs it supervises."""
