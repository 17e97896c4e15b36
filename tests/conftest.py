import functools
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` are skipped, with the reason, where torch sees no CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marked cuda)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    # Tests run two at a time on CI's 2 cores at most; one torch thread each keeps them from fighting
    # (two OpenMP threads on a busy core run ~10× slower). Agents started in-process with --threads 0 get 1 too.
    import cleanrl_plus.run

    torch.set_num_threads(1)
    monkeypatch.setattr(cleanrl_plus.run, "resolve_threads", lambda threads: threads or 1)
    yield


@pytest.fixture
def runs_dir(tmp_path):
    return str(tmp_path / "runs")


def run_script(*args: str, timeout: float = 300, **kwargs):
    import subprocess

    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, **kwargs)


def cli_in_process(agent: str, argv: list[str], monkeypatch, capsys):
    """The agent's command line run in this process (cli_main, as the script runs it): its exit code, stdout and stderr."""
    import importlib
    import types

    from cleanrl_plus.run import cli_main

    module = importlib.import_module(f"agents.{agent}")
    capsys.readouterr()
    with monkeypatch.context() as patch, pytest.raises(SystemExit) as exit_info:
        patch.setattr(sys, "argv", [f"{agent}.py", *argv])
        cli_main(module.main, module.Args)
    output = capsys.readouterr()
    return types.SimpleNamespace(returncode=exit_info.value.code, stdout=output.out, stderr=output.err)


class OnTheGpu:
    """A saved RNG state as a checkpoint loaded with map_location='cuda' holds it: only `.cpu()` gives the ByteTensor
    that torch.set_rng_state and Generator.set_state take (a CUDA tensor is refused just as this object is)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def cpu(self) -> torch.Tensor:
        return self.tensor


def assert_states_equal(a, b, where: str) -> None:
    """Two checkpoint states (nested dicts, lists, tensors, arrays) equal to the bit; `where` names the first difference.
    NaN equals NaN at the same place (LEAST's histories hold NaN where no episode reached a step); pickled simulators
    (bytes) compare by type only, as equal objects may pickle to different bytes (test what they restore instead)."""
    if isinstance(a, bytes):
        assert isinstance(b, bytes), where
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype, where
        if a.is_floating_point():
            assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()]), where
        else:
            assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_states_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_states_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), where  # a NaN float equals a NaN float


@functools.cache
def rounding_fingerprint() -> str:
    """A short hash of what this machine's kernels return on fixed inputs: the transcendental functions the agents use
    (MKL's vector math picks its code path by CPU model, not only by instruction set), batched and plain matrix products
    at the agents' sizes, a convolution, reductions, layer norm and one fused Adam step, on one thread as the tests run.
    Two machines with the same fingerprint round these alike; two with different ones do not."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _hash_of_kernel_outputs()
    finally:
        torch.set_num_threads(threads)


def _hash_of_kernel_outputs() -> str:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(10, 256, 64, generator=generator)
    w = torch.randn(10, 64, 64, generator=generator) / 8
    b = torch.randn(10, 1, 64, generator=generator)
    images = torch.randn(4, 4, 10, 10, generator=generator)
    kernel = torch.randn(16, 4, 3, 3, generator=generator)
    parameter, gradient = torch.randn(4096, generator=generator), torch.randn(4096, generator=generator)
    optimizer = torch.optim.Adam([parameter], lr=1e-3, fused=True)
    parameter.grad = gradient
    optimizer.step()
    outputs = [
        *(f(x) for f in (torch.tanh, torch.exp, torch.sigmoid, torch.sin, torch.cos, torch.expm1, torch.erf)),
        torch.log(x.abs() + 1e-3),
        torch.log1p(x.abs()),
        x.softmax(-1),
        x.log_softmax(-1),
        x.logsumexp(-1),
        torch.bmm(x, w),
        torch.baddbmm(b, x, w),
        torch.bmm(x.transpose(1, 2), x),
        torch.nn.functional.linear(x[0], w[0], b[0, 0]),
        torch.nn.functional.linear(x[0, :, :4], w[0, :, :4]),
        torch.nn.functional.conv2d(images, kernel),
        x.sum(),
        x.mean(1),
        x.std(-1),
        x.square().sum(-1).sqrt(),
        torch.nn.functional.layer_norm(x, (64,)),
        parameter.detach(),
    ]
    return hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in outputs)).hexdigest()[:12]


def cpu_fingerprint() -> tuple[str, str, str]:
    """("rounding <hash>", "vendor capability", "vendor"), e.g. ("rounding 3f0c…", "GenuineIntel AVX512",
    "GenuineIntel"): the keys under which digests of this machine's numbers may be recorded, most specific first. The
    same code rounds differently on another CPU (its BLAS and vector kernels block sums and approximate functions
    differently; two AMD EPYC boxes here did), so bit-for-bit digests are kept per CPU."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    vendor = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("vendor_id")), "unknown")
    return f"rounding {rounding_fingerprint()}", f"{vendor} {torch.backends.cpu.get_cpu_capability()}", vendor


def digests_for_this_cpu(tables: dict[str, dict[str, str]]) -> dict[str, str] | None:
    """The table recorded on this machine: under its rounding fingerprint, else "vendor capability", else the vendor
    alone (tables recorded before fingerprints existed); None if none."""
    return next((tables[key] for key in cpu_fingerprint() if key in tables), None)
