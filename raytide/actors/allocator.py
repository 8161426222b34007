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
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameter numbers (``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed value on 64-bit).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory at the top of the heap kept before it is returned to the OS.
TRIM_THRESHOLD = 128 * 1024 * 1024


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
