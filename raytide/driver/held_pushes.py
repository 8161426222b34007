"""The driver's thread that sends the pushes held back for an advance that did not come
(:class:`HeldPushes`; :mod:`raytide.driver.inputs` holds a push's last batch per replica for
the call after it): records pushed into an epoch left open still reach the job within
:data:`HOLD_S`, as Flink's buffer timeout sends a partly filled buffer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: How long a push is held for the advance after it before it goes in a call of its own.
HOLD_S = 0.01
#: How long the thread that sends held pushes waits for one before it ends (the next push starts one).
SENDER_IDLE_S = 5.0


class HeldPushes:
    """A thread that sends the pushes held longer than :data:`HOLD_S`; it runs while pushes
    are held and ends after :data:`SENDER_IDLE_S` without.

    ``send_old(age)`` sends those held at least ``age`` seconds and says whether any are still held.
    """

    def __init__(self, send_old: Callable[[float], bool]) -> None:
        self.send_old = send_old
        self.armed = threading.Event()  # set while a push may be held
        self.lock = threading.Lock()  # guards `thread`: one sender, started again after it ended
        self.thread: threading.Thread | None = None
        #: What stopped the thread (the job failed, a feed a restored snapshot refuses): the driver's next call raises it.
        self.error: BaseException | None = None

    def held(self) -> None:
        """A push was just held: it goes within :data:`HOLD_S` unless a call takes it first."""
        self.armed.set()
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="raytide-held-pushes", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        while True:
            if not self.armed.wait(SENDER_IDLE_S):
                with self.lock:
                    if not self.armed.is_set():
                        self.thread = None
                        return
            time.sleep(HOLD_S)
            self.armed.clear()
            try:
                if self.send_old(HOLD_S):
                    self.armed.set()
            except Exception as error:  # raised by the driver's next call, never dropped
                with self.lock:
                    self.error, self.thread = error, None
                return
