"""What supervises a job, written once for both worlds: the Ray driver (:mod:`raytide.driver`)
and the in-process simulator (:mod:`raytide.testing`) run this code, each through a runtime
of its own that carries out the effects.

The supervisor loop (events in, machine steps, effects out)::

        deaths noticed ─┐     job events (EpochComplete, OutputFrontier, JobFailed, JobFinished)
     (the world's own   │          │
      detection)        ▼          ▼
                  ┌───────────┐  ┌───────────────────────────┐
                  │  Verdict  │  │ the shown outputs: gate,   │
                  │ (deaths.py)│  │ Deliveries book (outputs) │
                  └─────┬─────┘  └───────────────────────────┘
          fail the job  │  a death: recover (a new Recovering, or Died
          (a failure    │  into the recovery / rescale under way)
          that is no    ▼
          death)   ┌──────────────┐  effect   ┌──────────────────────────┐
                   │  Execution   │ ────────▶ │ runtime: one method per  │
                   │ (execution.py)│ ◀──────── │ effect (runtime.py)      │
                   └──────────────┘  answer   └──────────────────────────┘
                   Recovering / Rescaling          Ray: driver/recovery_runtime.py,
                   (the pure machines)                  driver/rescale.py
                                                   simulator: testing/runtime.py

An :class:`~raytide.supervisor.execution.Execution` feeds a machine's effects to a runtime
(:mod:`raytide.supervisor.runtime`: ``RecoveryRuntime`` and ``RescaleRuntime``, a method per
effect) and its answers back to the machine; the Ray runtime answers at once (it waits, with
a timeout, for every actor it addresses), the simulator's queues steps its scheduler runs one
at a time and answers at the last. What both worlds keep of a job's inputs and outputs is
one piece of code too: the log of calls a recovery replays (:mod:`raytide.supervisor.replay`).
"""
