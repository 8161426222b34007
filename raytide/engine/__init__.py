"""A replica's engine and the progress actor's core, as pure state machines: running the
fused vertices' callbacks, where sends go, holding progress back while it cannot matter,
pending notifications, the tracker's side of the protocol, and when the driver hands out a
completed output epoch. The Ray actors (:mod:`raytide.actors`) and the in-process runtime
(:mod:`raytide.testing`) run the same cores."""
