"""``holodesk bench --cold-start``: from a checkpoint on local disk to the first proposal, in fresh
processes, with the page cache cold and warm, against the file-read floor.

1. **Checkpoint** (:mod:`holodesk.bench.cold_checkpoint`). A random checkpoint in the published layout is
   written to ``--cold-start-dir`` (default ``$TMPDIR/holodesk-cold-start-{full,tiny}``): full size
   (:func:`~holodesk.bench.model.write_full_checkpoint`, 24.5 GiB of bf16 in 6 shards of at most 5 GB, drawn on
   the GPU, written one shard at a time), or with ``--tiny`` the tiny test checkpoint; its tokenizer is
   ``--tokenizer``'s (``tekken``: the stand-in with Holotron's 131,072 ids, so that the first proposal's prompt
   has a real run's length; full size only). A folder this bench wrote with the same size and seed is reused,
   its tokenizer files and the token ids of config.json and generation_config.json changed when another
   tokenizer is asked for (its file list and sizes are recorded in the folder's marker file). ``--checkpoint
   DIR`` measures that folder instead and writes nothing. Every file is ``fsync``-ed, so its pages can be
   dropped.
2. **Read floor.** Every file of the folder read through (:func:`~holodesk.bench.page_cache.read_seconds`,
   4 readers) with the files dropped from the page cache (:func:`~holodesk.bench.page_cache.drop`:
   ``drop_caches`` when root unless ``--cold-start-drop files``, always ``POSIX_FADV_DONTNEED``), and again
   with them cached. The residency (``mincore``) before and after each drop is reported: a drop that left
   the files cached is reported as such (``dropped`` False), never passed off as cold.
3. **Fresh processes.** ``python -m holodesk.bench.cold_start`` (a new interpreter) per entry of
   ``--cold-start-runs`` (default ``cold,warm``): ``cold`` drops the files first, ``warm`` reads them into the
   cache first. Before each, the files in Triton's and inductor's on-disk caches are counted
   (:func:`compile_caches`): the first process on a fresh machine also compiles and autotunes every kernel.
   The child starts as ``load_local_policy`` does: it reads ahead the files the last start read besides its
   weights (:func:`holodesk.policy.start_files.read_ahead`; ``--no-read-ahead`` leaves that out) and records
   those its own load reads for the next (reported: ``read_ahead``, ``recorded_files``).
   The child records wall-clock timestamps at: interpreter up (this module imported), imports done (torch
   and its CUDA context, the transformers classes loading uses, the policy; each step timed on its own:
   :data:`IMPORT_STEPS`, :func:`imports_split`), model built (``load_holotron``'s last progress stage,
   :data:`~holodesk.policy.holotron.loader.BUILT_BESIDE_READ`: the model stands on the weights still being
   read), weights on the device (the last byte: ``LoadedHolotron.weights_ready_at``; the static engine was
   built, its CUDA graphs of the warm-up's shapes captured, warmed up and the grammar compiled beside the read,
   until then), graphs ready (``HolotronPolicy.load`` returned: what was derived from
   the weights before their last byte made again), and each of
   ``--cold-start-steps`` ``HolotronPolicy.propose`` calls on a new 1920x1080 desktop-like frame, with the
   graphs that step recorded on their first use (``lazy_captures``: count and seconds; a step's other
   windows and padded lengths run eagerly once, then are recorded). It writes them as JSON for the parent,
   which took the spawn time.

Reported per process: ``startup_s`` (spawn -> interpreter up), ``imports_s`` (split into
``imports_split``; ``bytecode``: how many of the modules imported by then have no cached bytecode, i.e. are
compiled from source at every start, :func:`bytecode_report`), ``model_s`` (imports -> model built), ``load_s``
(imports -> weights), ``capture_s`` (weights -> graphs ready; the engine's own seconds, split by
:func:`_engine_split`, mostly fall inside ``load_s`` now), ``first_proposal_s``,
``total_s`` (spawn -> first proposal), each step's wall time and graphs recorded on first use, and
``load_over_floor`` = ``load_s`` / the read floor of the same cache state. Target (issue 16):
``load_over_floor`` <= 2 and ``capture_s`` <= 10 s; the verdict is printed and kept in the JSON. A missed
target is not a failed check; these are (listed in ``checks_failed``, exit status 1): a child that fails or
times out, a ``propose`` that raises, and on CUDA Mamba-2 kernels that are not live (unless
``--allow-fallback``).
"""

from __future__ import annotations

import time

_T_UP = time.time()  # the child's "interpreter up": before anything heavy is imported

import argparse  # noqa: E402 - after the timestamp above
import getpass  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from holodesk.bench import page_cache  # noqa: E402
from holodesk.bench.cold_checkpoint import checkpoint_files, default_folder, prepare_checkpoint  # noqa: E402
from holodesk.errors import HolodeskError  # noqa: E402
from holodesk.policy.start_files import Recording, read_ahead  # noqa: E402

TARGET_LOAD_OVER_FLOOR = 2.0
TARGET_CAPTURE_S = 10.0
CHILD_TIMEOUT_S = 420
IMPORT_STEPS = ("torch", "cuda_context", "transformers", "tokenizer_class", "model_class", "policy", "bench")
"""The child's import steps, in order, each ending at the timestamp ``import_<step>``: ``torch`` (``import
torch``), ``cuda_context`` (``torch.cuda.init()``; CUDA only), ``transformers`` (the package, which scans its
``models`` folder, after the kernels' preparation), ``tokenizer_class`` (``AutoTokenizer``), ``model_class``
(transformers' NemotronH Omni modelling module and what it imports: ``modeling_utils``, torch's dynamo and
distributed tensors, ...), ``policy`` (Holodesk's Holotron runtime) and ``bench`` (this bench's frame maker);
the last ends at "imports done"."""


def _drop(files: list[Path], system: bool) -> dict[str, Any]:
    """:func:`page_cache.drop` with the residency before and after, and whether it worked."""
    before = page_cache.resident_fraction(files)
    how = page_cache.drop(files, system=system)
    after = page_cache.resident_fraction(files)
    return {**how, "resident_before": _round(before), "resident_after": _round(after),
            "dropped": None if after is None else after < 0.05}


def _cache(files: list[Path]) -> None:
    """Read ``files`` through unless ``mincore`` says they are all in the page cache already."""
    if (page_cache.resident_fraction(files) or 0.0) < 0.99:
        page_cache.read_seconds(files)


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def measure_floor(files: list[Path], *, system_drop: bool) -> dict[str, Any]:
    """The file-read floor (module docstring, part 2): cold then warm read of ``files``.

    Returns:
        ``{"bytes", "cold": {"seconds", "GBps", "drop": ...}, "warm": {"seconds", "GBps", "resident"}}``.
    """
    nbytes = sum(f.stat().st_size for f in files)
    drop = _drop(files, system_drop)
    cold = page_cache.read_seconds(files)
    _cache(files)
    resident = page_cache.resident_fraction(files)
    warm = page_cache.read_seconds(files)
    return {"bytes": nbytes, "readers": 4,
            "cold": {"seconds": round(cold, 3), "GBps": round(nbytes / cold / 1e9, 3), "drop": drop},
            "warm": {"seconds": round(warm, 3), "GBps": round(nbytes / warm / 1e9, 3), "resident": _round(resident)}}


def run_child(folder: Path, args: argparse.Namespace, device: str, dtype: str) -> dict[str, Any]:
    """One fresh ``python -m holodesk.bench.cold_start`` process on ``folder``; its JSON with the parent's
    spawn time added, or ``{"error": ...}`` when it failed (exit status, timeout, no result)."""
    import torch  # lazy: torch (optional: the local extra)

    with tempfile.TemporaryDirectory(prefix="holodesk-cold-start-") as tmp:
        result_path = Path(tmp) / "child.json"
        cmd = [sys.executable, "-m", "holodesk.bench.cold_start", str(folder), "--device", device, "--dtype", dtype,
               "--result", str(result_path), "--steps", str(args.cold_start_steps), "--seed", str(args.seed),
               "--max-new-tokens", str(args.product_tokens), "--threads", str(torch.get_num_threads())]
        spawn = time.time()
        try:
            proc = subprocess.run(cmd, timeout=CHILD_TIMEOUT_S, capture_output=True, text=True, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"the child process ran past {CHILD_TIMEOUT_S} s and was killed", "spawn": spawn}
        log_tail = (proc.stdout + proc.stderr)[-4000:]
        if proc.returncode != 0 or not result_path.exists():
            return {"error": f"the child process exited with status {proc.returncode}", "log_tail": log_tail,
                    "spawn": spawn}
        child: dict[str, Any] = json.loads(result_path.read_text())
    child["spawn"] = spawn
    child["log_tail"] = log_tail[-1500:]
    return child


def compile_caches() -> dict[str, dict[str, Any]]:
    """Files in Triton's and inductor's on-disk caches (``TRITON_CACHE_DIR``, else ``~/.triton/cache``;
    ``TORCHINDUCTOR_CACHE_DIR``, else ``$TMPDIR/torchinductor_$USER``): with them empty, a process compiles
    and autotunes every kernel at load, which a cold page cache alone does not cause."""
    dirs = {"triton": os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache"),
            "inductor": os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            or str(Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}")}
    return {name: {"dir": d, "files": sum(len(names) for _root, _dirs, names in os.walk(d))}
            for name, d in dirs.items()}


def phases(child: dict[str, Any]) -> dict[str, float | None]:
    """Seconds between the child's timestamps (module docstring); None for a phase it did not reach."""
    t = {"spawn": child["spawn"], **child.get("timestamps", {})}

    def span(a: str, b: str) -> float | None:
        return round(t[b] - t[a], 3) if a in t and b in t else None

    return {"startup_s": span("spawn", "interpreter"), "imports_s": span("interpreter", "imports"),
            "model_s": span("imports", "model"), "load_s": span("imports", "weights"),
            "capture_s": span("weights", "graphs"),
            "first_proposal_s": span("graphs", "first_proposal"), "total_s": span("spawn", "first_proposal"),
            "spawn_to_weights_s": span("spawn", "weights")}


def imports_split(timestamps: dict[str, float]) -> dict[str, float]:
    """Seconds of each import step of :data:`IMPORT_STEPS` that the child timed (``import_<step>``
    timestamps), each from the end of the step before (the first from "interpreter"); a step it did not run
    (``cuda_context`` off CUDA) is left out. The steps add up to ``imports_s`` when the last one ends at
    "imports"."""
    out: dict[str, float] = {}
    start = timestamps.get("interpreter")
    for step in IMPORT_STEPS:
        end = timestamps.get(f"import_{step}")
        if end is None or start is None:
            continue
        out[step] = round(end - start, 3)
        start = end
    return out


def bytecode_report(modules: dict[str, Any] | None = None) -> dict[str, Any]:
    """How many of the imported modules (``sys.modules`` by default) have no cached bytecode: those loaded from a
    ``.py`` file whose ``__spec__.cached`` file does not exist, so that this process compiled them from source
    and every later one will too. Python writes that file at a module's first import unless
    ``PYTHONDONTWRITEBYTECODE`` is set or the folder is not writable (a module compiled on its first import
    with writing allowed has its file by then and is not counted); an install by pip writes it ahead. Compiling
    torch's and transformers' modules at every start roughly doubled the imports of a fresh process on the H100
    (docs/benchmarks.md, issue 34).

    Returns:
        ``{"modules": modules loaded from source files, "without_bytecode": of them, those without cached
        bytecode, "dont_write_bytecode": sys.flags.dont_write_bytecode, "packages": {top-level package:
        modules without bytecode}}`` (the 5 packages with the most).
    """
    if modules is None:
        modules = dict(sys.modules)
    sourced = missing = 0
    packages: dict[str, int] = {}
    seen: set[int] = set()
    for name, module in modules.items():
        if id(module) in seen:  # one module under two names (``__main__`` and ``__mp_main__``) counts once
            continue
        seen.add(id(module))
        spec = getattr(module, "__spec__", None)
        origin, cached = getattr(spec, "origin", None), getattr(spec, "cached", None)
        if not origin or not cached or not str(origin).endswith(".py"):
            continue
        sourced += 1
        if not os.path.exists(cached):
            missing += 1
            top = name.partition(".")[0]
            packages[top] = packages.get(top, 0) + 1
    top5 = dict(sorted(packages.items(), key=lambda kv: -kv[1])[:5])
    return {"modules": sourced, "without_bytecode": missing,
            "dont_write_bytecode": bool(sys.flags.dont_write_bytecode), "packages": top5}


def _bytecode_words(run: dict[str, Any]) -> str:
    """The child's :func:`bytecode_report` in words (``"-"`` when it sent none)."""
    report = run.get("bytecode")
    if not report:
        return "-"
    words = f"{report['without_bytecode']} of {report['modules']} modules without cached bytecode"
    if report["without_bytecode"]:
        words += (f" (compiled from source at every start: {report['packages']}; dont_write_bytecode "
                  f"{report['dont_write_bytecode']}; an installed Holodesk has its bytecode)")
    return words


def run_cold_start(args: argparse.Namespace, device: str, dtype: str) -> dict[str, Any]:
    """Parts 1-3 of the module docstring; returns the JSON-able result (``checks_failed``: the failed
    checks of the module docstring, in words).

    Raises:
        HolodeskError: a bad ``--cold-start-runs``, a ``--checkpoint`` that is not a folder, too little disk.
    """
    import torch  # lazy: torch (optional: the local extra)

    run_modes = modes(args.cold_start_runs)  # before 25 GB are written
    folder = args.checkpoint or args.cold_start_dir or default_folder(args.tiny)
    out: dict[str, Any] = {"checks_failed": []}
    if args.checkpoint is not None:
        if not folder.is_dir():
            raise HolodeskError(f"--checkpoint {folder} is not a folder on this machine",
                                hint="--cold-start measures a local checkpoint folder (or writes one without "
                                     "--checkpoint).")
        files = checkpoint_files(folder)
        out["checkpoint"] = {"folder": str(folder), "size": "given", "written": False, "write_s": None,
                             "bytes": sum(f.stat().st_size for f in files), "files": len(files)}
    else:
        out["checkpoint"] = prepare_checkpoint(folder, tiny=args.tiny, seed=args.seed, device=device,
                                               tokenizer=args.tokenizer)
        files = checkpoint_files(folder)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the draws' memory goes back before the children start
    out["checkpoint"]["filesystem"] = page_cache.filesystem(folder)
    print(f"cold start: checkpoint {out['checkpoint']}", flush=True)
    system_drop = args.cold_start_drop == "auto"
    floor = measure_floor(files, system_drop=system_drop)
    out["read_floor"] = floor
    print(f"cold start: read floor {floor}", flush=True)
    runs: list[dict[str, Any]] = []
    for mode in run_modes:
        if mode == "cold":
            state = _drop(files, system_drop)
        else:
            _cache(files)
            state = {"resident": _round(page_cache.resident_fraction(files))}
        caches = compile_caches()
        child = run_child(folder, args, device, dtype)
        run = {"mode": mode, "page_cache": state, "compile_caches_before": caches,
               **(phases(child) if "error" not in child else {}),
               "imports_split": imports_split(child.get("timestamps", {})), **_engine_split(child), **child}
        if "error" in child:
            out["checks_failed"].append(f"{mode} start: {child['error']}")
        elif child.get("propose_error"):
            out["checks_failed"].append(f"{mode} start: propose failed: {child['propose_error']}"[:500])
        elif device.startswith("cuda") and not child.get("fast_path") and not args.allow_fallback:
            out["checks_failed"].append(f"{mode} start: Mamba-2 kernels are not live: {child.get('kernels')}")
        floor_s = floor[mode]["seconds"]
        if run.get("load_s") is not None and floor_s > 0:
            run["load_over_floor"] = round(run["load_s"] / floor_s, 2)
        run["target"] = _verdict(run)
        runs.append(run)
        print(f"cold start, {mode} page cache: read ahead {_ahead_words(run)}; " + ", ".join(
            f"{k} {run.get(k)}" for k in ("startup_s", "imports_s", "model_s", "load_s", "load_over_floor", "capture_s",
                                          "engine_setup_s", "engine_build_s", "decode_capture_s",
                                          "prefill_capture_s", "warm_up_s", "first_proposal_s", "total_s",
                                          "gemv_kept"))
              + f"; imports {run['imports_split']} s, {_bytecode_words(run)}"
              + f"; steps {[step['wall_s'] for step in run.get('steps', [])]} s, graphs recorded on first use "
              + f"{[_lazy_words(step) for step in run.get('steps', [])]}; page cache {state}; "
              + run["target"], flush=True)
    out["runs"] = runs
    return out


def modes(spec: str) -> list[str]:
    """``--cold-start-runs`` as a list, e.g. ``"cold,warm,cold"`` -> ``["cold", "warm", "cold"]``.

    Raises:
        HolodeskError: an entry other than cold or warm.
    """
    out = [m.strip() for m in spec.split(",") if m.strip()]
    bad = [m for m in out if m not in ("cold", "warm")]
    if bad or not out:
        raise HolodeskError(f"--cold-start-runs takes a comma list of cold and warm, got {spec!r}",
                            hint="For example --cold-start-runs cold,warm.")
    return out


def _ahead_words(run: dict[str, Any]) -> str:
    """A child's ``read_ahead`` in words: the files asked for of those listed, their size (``"-"``: none)."""
    ahead = run.get("read_ahead")
    return "-" if not ahead else f"{ahead['advised']} of {ahead['files']} files ({ahead['bytes'] / 1e9:.2f} GB)"


def _lazy_words(step: dict[str, Any]) -> str:
    """A step's ``lazy_captures`` in words, e.g. ``"14 in 0.52 s"`` (``"-"`` without a static engine)."""
    lazy = step.get("lazy_captures")
    return "-" if not lazy else f"{lazy['count']} in {lazy['seconds']} s"


def _engine_split(child: dict[str, Any]) -> dict[str, Any]:
    """The engine's part of ``capture_s``: its whole setup and, within it, the build (state, host slots, the
    matrix-vector kernel choice), the capture of the decode and of the prefill graphs (``StaticDecoder.capture``)
    and the warm-up (the rest of ``capture_s`` is the grammar's compilation), and the roles whose
    matrix-vector kernel was kept from an earlier load rather than timed (``gemv_kept``)."""
    engine = child.get("engine") or {}
    captured = engine.get("capture_seconds") or {}
    return {"engine_setup_s": engine.get("setup_seconds"), "engine_build_s": engine.get("build_seconds"),
            "decode_capture_s": captured.get("decode"), "prefill_capture_s": captured.get("prefill"),
            "warm_up_s": engine.get("warm_up_seconds"), "gemv_kept": engine.get("gemv_kept")}


def _verdict(run: dict[str, Any]) -> str:
    """The target check of one run, in words."""
    ratio, capture = run.get("load_over_floor"), run.get("capture_s")
    if ratio is None or capture is None:
        return "target: not measured"
    met = ratio <= TARGET_LOAD_OVER_FLOOR and capture <= TARGET_CAPTURE_S
    return (f"target {'met' if met else 'NOT met'}: load {ratio}x the read floor (<= {TARGET_LOAD_OVER_FLOOR}x), "
            f"capture {capture} s (<= {TARGET_CAPTURE_S:.0f} s)")


def _import_steps(cuda: bool, threads: int, stamps: dict[str, float]) -> None:
    """Import what the child's start needs, one step of :data:`IMPORT_STEPS` at a time, each step's end
    written to ``stamps`` as ``import_<step>`` and the last also as ``imports``; ``threads`` > 0 sets torch's
    CPU threads, ``cuda`` creates the CUDA context (it belongs to the imports, not to reading the weights)."""
    # lazy (here and below): torch (optional: the local extra); the child times these imports (module docstring)
    import torch

    stamps["import_torch"] = time.time()
    if threads > 0:
        torch.set_num_threads(threads)
    if cuda:
        torch.cuda.init()
        stamps["import_cuda_context"] = time.time()
    from holodesk.policy.holotron.kernels import prepare_kernels

    prepare_kernels()  # before transformers imports NemotronH, as load_holotron does
    import transformers  # noqa: F401

    stamps["import_transformers"] = time.time()
    # transformers imports lazily: name the classes loading uses, so that their modules load here
    from transformers import AutoTokenizer  # noqa: F401

    stamps["import_tokenizer_class"] = time.time()
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3  # noqa: F401

    stamps["import_model_class"] = time.time()
    from holodesk.errors import PolicyError, PolicyOutputError  # noqa: F401
    from holodesk.policy.base import Observation  # noqa: F401
    from holodesk.policy.generation import GenerationOptions  # noqa: F401
    from holodesk.policy.holotron.policy import HolotronPolicy  # noqa: F401

    stamps["import_policy"] = time.time()
    from holodesk.bench.product import TASK, desktop_frame  # noqa: F401

    stamps["import_bench"] = stamps["imports"] = time.time()


# ------------------------------------------------------------------------------------------------ the child
def _child_args(argv: list[str]) -> argparse.Namespace:
    """The child's command line (:func:`child_main`)."""
    p = argparse.ArgumentParser(prog="python -m holodesk.bench.cold_start")
    p.add_argument("folder", type=Path)
    p.add_argument("--device", required=True)
    p.add_argument("--dtype", required=True)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--no-read-ahead", action="store_true",
                   help="start without reading ahead the files the last start read (holodesk.policy.start_files)")
    return p.parse_args(argv)


def child_main(argv: list[str]) -> int:
    """The fresh process (module docstring, part 3): load, build the policy, propose; JSON to ``--result``."""
    args = _child_args(argv)
    stamps: dict[str, float] = {"interpreter": _T_UP}
    # as load_local_policy does before its imports: the last start's files read ahead, this start's recorded
    ahead = None if args.no_read_ahead else read_ahead()
    recording = Recording().__enter__()  # left when the load returns, below (as load_local_policy's "with")
    _import_steps(args.device.startswith("cuda"), args.threads, stamps)
    bytecode = bytecode_report()
    # lazy (here and below): torch (optional: the local extra); imported by _import_steps, which timed them
    import torch

    from holodesk.bench.product import TASK, desktop_frame
    from holodesk.errors import PolicyError, PolicyOutputError
    from holodesk.policy.base import Observation
    from holodesk.policy.generation import GenerationOptions
    from holodesk.policy.holotron.loader import BUILT_BESIDE_READ
    from holodesk.policy.holotron.policy import HolotronPolicy

    cuda = args.device.startswith("cuda")

    def progress(stage: str, _fraction: float | None) -> None:
        if stage in ("ready", BUILT_BESIDE_READ):  # load_holotron returned: the model built
            stamps["model"] = time.time()

    options = GenerationOptions(max_images=3, max_reply_tokens=args.max_new_tokens, max_string_chars=24)
    try:
        policy = HolotronPolicy.load(args.folder, options, dtype=args.dtype, device=args.device, progress=progress)
    finally:
        recording.__exit__()
    if cuda:
        torch.cuda.synchronize()
    stamps["graphs"] = time.time()
    if policy.loaded.weights_ready_at is not None:
        stamps["weights"] = policy.loaded.weights_ready_at
    steps: list[dict[str, Any]] = []
    error = None
    for k in range(args.steps):
        before = _lazy_captures(policy)
        t0 = time.perf_counter()
        try:
            proposal = policy.propose(Observation(task=TASK, frame=desktop_frame(args.seed + 1000 + k)))
        except (PolicyError, PolicyOutputError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        finally:
            if k == 0:
                stamps["first_proposal"] = time.time()
        wall = round(time.perf_counter() - t0, 3)
        after = _lazy_captures(policy)
        details = ("tiles", "image_tokens", "prompt_tokens", "generated_tokens", "stop_reason")
        steps.append({"wall_s": wall, "timings_ms": {name: round(v, 1) for name, v in proposal.timings_ms.items()},
                      "lazy_captures": None if before is None or after is None else {
                          "count": after["count"] - before["count"],
                          "seconds": round(after["seconds"] - before["seconds"], 3)},
                      **{name: proposal.extra.get(name) for name in details}})
    engine = policy.engine.describe() if policy.engine is not None else None
    recorded = recording.save(exclude=args.folder)  # after the timed part (the product keeps it at the load's end)
    result = {
        "pid": os.getpid(), "timestamps": stamps, "bytecode": bytecode, "steps": steps, "propose_error": error,
        "load_seconds": round(policy.loaded.load_seconds, 3), "engine": engine,
        "kernels": policy.loaded.kernels.get("summary"), "fast_path": bool(policy.loaded.kernels.get("fast_path")),
        "gpu_allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 2) if cuda else None,
        "max_rss_gib": round(_max_rss_bytes() / 2**30, 2),
        "read_ahead": None if ahead is None else {"files": ahead.listed, "advised": ahead.advised,
                                                  "bytes": ahead.bytes, "done": not ahead.is_alive()},
        "recorded_files": len(recorded),
    }
    policy.close()
    args.result.write_text(json.dumps(result, default=str))
    return 0


def _lazy_captures(policy: Any) -> dict[str, Any] | None:
    """The static engine's graphs recorded on first use since load (``StaticEngine.describe()``'s
    ``lazy_captures``: count, seconds), or None with the stock decoder."""
    return None if policy.engine is None else dict(policy.engine.describe()["lazy_captures"])


def _max_rss_bytes() -> int:
    """Peak resident memory of this process (``getrusage``; Linux reports KiB)."""
    import resource  # lazy: the cold-start child times its imports (module docstring)

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
