"""``ray job submit`` of examples/spark_wordcount.py and examples/spark_streaming.py to a
real Ray head started here: one job whose entrypoint runs one example after the other (one
submission, one upload of the working directory, one job driver's set-up: a second
submission cost the test 60-100 s of its 300-450 on 2 busy cores).

The head is this test's own: ``ray start --head --block`` on free ports, with its own
short ``--temp-dir`` (so its ``ray_current_cluster`` file does not redirect other
processes' ``ray.init()`` to it), started in a new session (process group). It is
stopped by signalling that ``ray start`` process (SIGTERM: with ``--block``, it tears
its node down at once, as ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0`` skips the drain) and
then killing whatever is left in its process group (the job's driver runs in a session
of its own and exits when its raylet goes). ``ray stop`` is
never called: it would stop every Ray on the machine, the test session's own included.

Ray 2.60 turns token authentication on for ``ray start --head``; the job CLI sends the
token (``~/.ray/auth_token``, generated if missing) only when ``RAY_AUTH_MODE=token`` is
in its environment, so every CLI call here gets it. The CLIs are the ones next to
``sys.executable`` (the venv's), and the head's PATH starts with that directory so that
the job's ``python`` is the venv's interpreter too.
"""

from __future__ import annotations

import collections
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from examples.spark_streaming import expected_counts
from tests import lanes

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
JOB_TIMEOUT = 420  # both examples, one after the other: each took up to 240 s beside two busy session lanes
#: What ``ray start`` prints once its node registered with the GCS.
STARTED = "Ray runtime started."
#: Heads started for the test, when the earlier ones failed to come up (see ``head``).
HEAD_ATTEMPTS = 3
#: Submissions of one job, when the head refused the earlier ones before creating it (see ``submit``).
SUBMIT_ATTEMPTS = 3
RESULT = re.compile(r"^RESULT word=(\S+) count=(\d+)$", re.MULTILINE)
TOTAL = re.compile(r"^RESULT total=(\d+) distinct=(\d+)$", re.MULTILINE)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the OS says are free now (held together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_range(size: int) -> tuple[int, int]:
    """A run of ``size`` free ports below the ephemeral range and above Ray's default worker ports."""
    for _ in range(50):
        low = random.randrange(20_000, 32_000 - size)
        try:
            for port in range(low, low + size):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return low, low + size - 1
    raise RuntimeError(f"no run of {size} free ports found")


def cli_env(own_ray_env: dict[str, str]) -> dict[str, str]:
    """The environment of the Ray CLIs: one that starts or addresses a Ray of its own (see the module docstring)."""
    env = {k: v for k, v in own_ray_env.items() if k != "RAY_API_SERVER_ADDRESS"}
    env["RAY_AUTH_MODE"] = "token"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Head:
    """A Ray head of our own, reachable at ``self.dashboard`` for the job CLI."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        gcs, dashboard, client, agent_http, agent_grpc, env_agent, metrics, node_manager, object_manager = free_ports(9)
        low, high = free_range(200)
        # Sockets live under the temp dir: keep it short (AF_UNIX paths are limited to 107 bytes).
        self.temp_dir = tempfile.mkdtemp(prefix="rtjs", dir="/tmp")
        self.dashboard = f"http://127.0.0.1:{dashboard}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "ray-head.log"
        command = [
            RAY, "start", "--head", "--block", "--num-cpus=2", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", f"--port={gcs}", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={env_agent}", f"--metrics-export-port={metrics}",
            f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}",
            f"--min-worker-port={low}", f"--max-worker-port={high}", f"--temp-dir={self.temp_dir}",
        ]
        self.env = env
        head_env = {**env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}  # on SIGTERM, stop at once (no 30 s drain)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, cwd=workdir, env=head_env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def job(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        """``ray job <args> --address <our dashboard>`` from the repository root."""
        command, rest = args[0], args[1:]
        done = subprocess.run([RAY, "job", command, "--address", self.dashboard, *rest], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"ray job {command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n"
                                 f"head log:\n{self.log_tail()}")
        return done

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait until ``ray start`` says its node started and the job server answers.

        The job server can answer before the node registered: ``ray start`` then still fails
        (Ray waits a hard-coded 30 s for its raylet) and takes the head down mid-submission,
        so answering alone is not ready.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HeadDidNotStart(f"ray start exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.started() and self.job("list", check=False, timeout=60).returncode == 0:
                return
            time.sleep(0.5)  # reading the log is cheap; the job CLI is asked only once the node started
        raise HeadDidNotStart(f"the Ray head did not start and answer within {timeout} s:\n{self.log_tail()}")

    def started(self) -> bool:
        """Whether ``ray start`` has said so, anywhere in its log (the tail may have moved past it)."""
        return self.log.exists() and STARTED in self.log.read_text(errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        """The tail of ``ray start``'s output, then of its GCS's and raylet's own logs (a head that
        did not start is removed with its temp dir: what they said is kept only here)."""
        tail = self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
        for name in ("gcs_server.out", "raylet.out"):
            for path in {found.resolve() for found in Path(self.temp_dir).glob(f"session_*/logs/{name}")}:
                tail += f"\n--- {path.name}:\n" + path.read_text(errors="replace")[-chars // 2:]
        return tail

    def stop(self) -> None:
        """Stop this head only: SIGTERM to ``ray start --block``, then SIGKILL to what is left of its group."""
        group = self.process.pid  # start_new_session: the group id is the leader's pid
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 15
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.5)
        if _group_alive(group):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process.poll() is None:
            self.process.wait(timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class HeadDidNotStart(AssertionError):
    """``ray start --head`` exited or did not come up in time."""


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture()
def head(tmp_path, own_ray_env, request):
    """A started head; one that failed to come up is stopped and a fresh one started on new ports.

    On a loaded machine a raylet can take longer than the 30 s ``ray start`` waits for it to
    register, or a port found free can be taken before the head binds it; neither says
    anything about raytide, and a second head normally starts.
    """
    with lanes.quiet_start(request.config):  # the head's start, and its job's Ray and Spark, on their own
        for attempt in range(1, HEAD_ATTEMPTS + 1):
            started = Head(tmp_path / f"head{attempt}", cli_env(own_ray_env))
            try:
                started.wait_ready()
                break
            except HeadDidNotStart as error:
                print(f"head attempt {attempt} of {HEAD_ATTEMPTS} did not start:\n{error}", file=sys.stderr, flush=True)
                started.stop()
                if attempt == HEAD_ATTEMPTS:
                    raise
        try:
            yield started
        finally:
            started.stop()


def write_input(path: Path) -> collections.Counter:
    """A text file of skewed words; returns the reference counts (plain Python)."""
    rng = random.Random(7)
    vocabulary = [f"w{i:02d}" for i in range(40)] + ["timely", "dataflow", "spark"]
    lines = [" ".join(rng.choices(vocabulary, weights=range(len(vocabulary), 0, -1), k=rng.randint(0, 9)))
             for _ in range(5000)]
    path.write_text("\n".join(lines) + "\n")
    return collections.Counter(word for line in lines for word in line.split())


def submit(head: Head, name: str, *entrypoint: str) -> str:
    """Submit ``entrypoint`` (a shell command line's words) from the repository root and wait
    for it to succeed; its logs.

    ``ray job submit`` tails the job's logs until it exits and ends with its status (``Job
    '...' succeeded``), so a job that succeeded needs no ``ray job status`` or ``ray job logs``
    after it: each of those CLIs costs a process that imports Ray (2-6 s on 2 busy cores).
    They are asked only when the submission failed: a submission the head refused before it
    created the job is made again, at most :data:`SUBMIT_ATTEMPTS` times (a loaded head's job
    server can answer before its job agent is up, "No available agent to submit job, please
    try again later", and the job then does not exist); a job that was created is never
    submitted twice, and its failure is reported with its status and full logs.
    """
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        submission = f"raytide-{name}-{uuid.uuid4().hex[:8]}"
        submitted = head.job("submit", "--submission-id", submission, "--working-dir", ".", "--", *entrypoint,
                             timeout=JOB_TIMEOUT, check=False)
        if submitted.returncode == 0 and f"Job '{submission}' succeeded" in submitted.stdout:
            return submitted.stdout
        status = head.job("status", submission, check=False)
        if status.returncode == 0 or "does not exist" not in status.stderr or attempt == SUBMIT_ATTEMPTS:
            break
        time.sleep(5)
    logs = head.job("logs", submission, check=False).stdout
    raise AssertionError(
        f"submit exit {submitted.returncode} (attempt {attempt})\nstatus: {status.stdout}{status.stderr[-2000:]}\n"
        f"submit stdout:\n{submitted.stdout[-3000:]}\nsubmit stderr:\n{submitted.stderr[-3000:]}\n"
        f"job logs:\n{logs[-6000:]}\nhead log:\n{head.log_tail()}")


#: Up to :data:`HEAD_ATTEMPTS` heads (a failed one takes 60-130 s on a saturated machine) and one
#: submission of :data:`JOB_TIMEOUT` at most: the suite's 480 s cut the last full run's third head short.
@pytest.mark.timeout(HEAD_ATTEMPTS * 130 + JOB_TIMEOUT)
def test_the_spark_examples_submitted_with_ray_job_submit(head, tmp_path):
    reference = write_input(tmp_path / "lines.txt")
    top, files = 12, 3
    # The word count of a file, then the streaming example: files land while a Spark streaming
    # query feeds the job, written with write_parquet and read back by Spark, in the cluster's
    # job (the example checks the counts against the files itself and fails otherwise).
    word_count = ["python", "examples/spark_wordcount.py", "--input", str(tmp_path / "lines.txt"), "--top", str(top)]
    streaming = ["python", "examples/spark_streaming.py", "--files", str(files), "--every", "0.5",
                 "--root", str(tmp_path / "stream")]
    logs = submit(head, "examples", "bash", "-c", f"{shlex.join(word_count)} && echo STREAMING && {shlex.join(streaming)}")
    counts, streamed = logs.split("\nSTREAMING\n", 1)
    expected = sorted(reference.items(), key=lambda item: (-item[1], item[0]))[:top]
    found = [(word, int(count)) for word, count in RESULT.findall(counts)]
    assert found == expected, counts[-4000:]
    assert TOTAL.findall(counts) == [(str(sum(reference.values())), str(len(reference)))]

    counted = {word: int(count) for word, count in RESULT.findall(streamed)}
    assert counted == dict(expected_counts(files)), streamed[-4000:]
    assert f"RESULT files={files} " in streamed and re.findall(r"^BATCH \d+: \d+ words$", streamed, re.MULTILINE), \
        streamed[-4000:]
