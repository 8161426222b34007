"""Keep large freed buffers inside a vertex actor's process instead of handing them back to the OS.

Vectorised vertices allocate and free arrays of a few megabytes on every call. glibc
serves a block above its *mmap threshold* with a fresh ``mmap`` and unmaps it on
``free``, so the next array of that size page-faults on every 4 KiB page again. The
threshold adapts to a process's history, so two replicas of the same vertex can differ
threefold in page faults and in time: on the 2-core machine, connected components'
slower replica took 36,000 page faults per run against 13,000 for the other, and
finished its iterations 2-4 times later. Pinning the thresholds makes freed blocks up to
:data:`MMAP_THRESHOLD` come back from the heap (already mapped), and keeps up to
:data:`TRIM_THRESHOLD` of free heap in the process, at the cost of that much resident
memory at most.

Only glibc has ``mallopt`` with these parameters; elsewhere this does nothing.

:func:`pretouch` goes one step further, as the JVM's ``-XX:+AlwaysPreTouch`` (and
Flink's former ``taskmanager.memory.preallocate``) do: it grows the heap by a given
amount at start-up, touching every page, and frees it again. With the thresholds pinned
the pages stay mapped, so the first large epoch takes its arrays from them instead of
faulting in fresh memory (on the 2-core machine, a page fault costs 1 to 15 µs, and
connected components' first iteration takes 10,000 of them per replica). Start-up pays
for those faults instead, and the actor keeps that much resident memory.
"""

from __future__ import annotations

import ctypes
import logging

from raytide.errors import ArgumentError

logger = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameter numbers (``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed value on 64-bit).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory at the top of the heap kept before it is returned to the OS.
TRIM_THRESHOLD = 128 * 1024 * 1024
#: The most :func:`pretouch` may take: half the trim threshold, so that the pretouched pages
#: plus the free memory a vertex leaves at the top of the heap stay below it (beyond it,
#: glibc would hand them all back at the next ``free``).
PRETOUCH_LIMIT_MB = TRIM_THRESHOLD // (2 << 20)
#: Size of the blocks :func:`pretouch` allocates: well below :data:`MMAP_THRESHOLD`, so they come from the heap.
_PRETOUCH_BLOCK = 8 << 20


def keep_freed_buffers() -> bool:
    """Pin glibc's mmap and trim thresholds in this process; returns whether it applied."""
    try:  # the C library is already loaded: look the symbol up in the process (find_library runs ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt (macOS, Windows): nothing to tune
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not applied:
        logger.debug("mallopt refused the thresholds; the allocator keeps its defaults")
    return applied


def pretouch(megabytes: int) -> None:
    """Map ``megabytes`` MiB of heap now, so that later arrays reuse them without page faults.

    Call it after :func:`keep_freed_buffers` applied: with glibc's default thresholds the
    freed pages would go straight back to the OS.

    Raises:
        ValueError: ``megabytes`` is negative or above :data:`PRETOUCH_LIMIT_MB`.
    """
    check_pretouch(megabytes)
    blocks = [bytearray(_PRETOUCH_BLOCK) for _ in range(-(-(megabytes << 20) // _PRETOUCH_BLOCK))]  # zero-filled: touched
    del blocks


def check_pretouch(megabytes: int) -> None:
    """Reject a :func:`pretouch` size that is not an integer from 0 to :data:`PRETOUCH_LIMIT_MB`."""
    if not isinstance(megabytes, int) or not 0 <= megabytes <= PRETOUCH_LIMIT_MB:
        raise ArgumentError(f"pretouch_mb must be an integer from 0 to {PRETOUCH_LIMIT_MB} (MiB per vertex actor), not {megabytes!r}")
