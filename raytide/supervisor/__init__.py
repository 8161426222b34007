"""What supervises a job, written once for both worlds: the Ray driver (:mod:`raytide.driver`)
and the in-process simulator (:mod:`raytide.testing`) run this code, each through a runtime
of its own that carries out the effects.

The supervisor loop (events in, machine steps, effects out)::

     deaths noticed (each world's own            job events (EpochComplete, OutputFrontier,
     detection, named as ReplicaLost/ActorLost)  JobFailed, JobFinished)
                  │                                        │
                  ▼                                        ▼
        supervise (deaths.py): judge, hand_death   ShownOutputs (outputs.py): the gate and
                  │                                the Deliveries book around the world's keeping
       a failure that is no death: fail the job
       a death: Died into the recovery / rescale under way, or a new Recovering
                  ▼
            ┌──────────────┐  effect   ┌──────────────────────────────────────┐
            │  Execution   │ ────────▶ │ runtime, one method per effect        │
            │(execution.py)│ ◀──────── │ (runtime.py: RecoveryRuntime,         │
            └──────────────┘  answer   │  RescaleRuntime)                      │
            Recovering / Rescaling     │ Ray: driver/recovery_runtime.py,      │
            (the pure machines)        │      driver/rescale.py                │
                                       │ simulator: testing/recovery.py,       │
                                       │      testing/rescaling.py             │
                                       └──────────────────────────────────────┘

An :class:`~raytide.supervisor.execution.Execution` feeds a machine's effects to a runtime
(:mod:`raytide.supervisor.runtime`: ``RecoveryRuntime`` and ``RescaleRuntime``, a method per
effect) and its answers back to the machine; the Ray runtime answers at once (it waits, with
a timeout, for every actor it addresses), the simulator's queues steps its scheduler runs one
at a time and answers at the last. What both worlds keep of a job's inputs and outputs is
one piece of code too: the log of calls a recovery replays (:mod:`raytide.supervisor.replay`)
and what is shown of each output (:mod:`raytide.supervisor.outputs`); so is the rule that finds
a death nobody announced, pinging every actor of a job that stalled (:mod:`raytide.supervisor.stalls`).
"""
