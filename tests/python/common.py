"""Helpers shared by the python suite's scripts: running the reference under torchrun and our
binary under mpirun, reading metrics/summary files, and a tiny check recorder."""
import glob
import json
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, log_path, env=None, timeout=600):
    """Runs cmd, output into log_path; raises with the log's tail on failure."""
    with open(log_path, "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=HERE)
    if p.returncode != 0:
        tail = open(log_path, errors="replace").read()[-3000:]
        raise RuntimeError(f"command failed (exit {p.returncode}): {' '.join(map(str, cmd))}\n--- {log_path} ---\n{tail}")


def skip_suite(reason):
    """Ends the test because a prerequisite is missing, through the suites' one skip helper
    (tests/support/skip.sh): exit 77 (ctest: skipped) when run by hand, exit 1 (a failure naming
    the prerequisite) under scripts/test.sh, where HPCTRAIN_REQUIRE_ALL_SUITES=1."""
    helper = os.path.join(HERE, "..", "support", "skip.sh")
    sys.stdout.flush()
    rc = subprocess.run(["bash", "-c", 'source "$1" && skip_suite "$2"', "skip_suite", helper, reason]).returncode
    sys.exit(rc if rc in (1, 77) else 1)


def ref_env(threads=1):
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONFAULTHANDLER"] = "1"  # a crash in a rank prints its Python stack into the run log
    return env


def free_port():
    """A TCP port nothing listens on now (the kernel's pick), so concurrent tests never collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_reference(out, config, overrides, variant="single", ranks=1, extra=(), log=None):
    cmd = [sys.executable]
    if ranks > 1:
        # --log-dir: torchrun's per-job directory goes into the run's own directory, not a
        # torchelastic_* directory in /tmp that nothing removes.
        cmd += ["-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), "--log-dir", os.path.join(out, "torchrun-logs")]
    cmd += ["-m", "hpctrain_ref.train_ref", "--config", config, "--variant", variant, "--out", out, *extra]
    for o in overrides:
        cmd += ["--set", o]
    os.makedirs(out, exist_ok=True)
    log = log or os.path.join(out, "run.log")
    try:
        run(cmd, log, env=ref_env())
    except RuntimeError as e:
        # The reference is third-party code (torchrun + gloo). A worker killed by a signal is that
        # stack failing, not a wrong answer: say so and rerun once; a second failure is reported.
        if ranks == 1 or "Signal 6 (SIGABRT)" not in str(e):
            raise
        print(f"NOTE: PyTorch reference ({variant}, {ranks} ranks) aborted by SIGABRT; log kept as "
              f"{log}.aborted, rerunning once", flush=True)
        os.replace(log, log + ".aborted")
        run(cmd, log, env=ref_env())


def mpi_prefix(ranks):
    mpiexec = os.environ.get("HT_MPIEXEC", "mpiexec")
    flags = os.environ.get("HT_MPIEXEC_FLAGS", "--oversubscribe --bind-to none").replace(";", " ").split()
    return [mpiexec, "-n", str(ranks), *flags]


def mpi_env():
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_ours(binary, out, config, overrides, ranks=2, log=None):
    cmd = mpi_prefix(ranks) + [binary, "train", "--config", config]
    for o in [f"train.output_dir={out}", *overrides]:
        cmd += ["--set", o]
    os.makedirs(out, exist_ok=True)
    run(cmd, log or os.path.join(out, "..", os.path.basename(out) + ".log"), env=mpi_env())


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_lines(path):
    return [r for r in read_jsonl(path) if "loss" in r and "step" in r]


def latest_checkpoint(run_dir):
    files = glob.glob(os.path.join(run_dir, "checkpoints", "*.h5"))
    if not files:
        raise RuntimeError(f"no checkpoint written under {run_dir}/checkpoints")
    import h5py
    return max(files, key=lambda p: int(h5py.File(p, "r").attrs["step"]))


class Checks:
    def __init__(self):
        self.passed, self.failed = 0, 0

    def check(self, ok, what):
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1
