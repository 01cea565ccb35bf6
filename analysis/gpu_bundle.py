#!/usr/bin/env python3
"""The GPU bundle: FlashInfer built ahead of time for the H200, carried to a host without network.

    python3 analysis/gpu_bundle.py build            # `make gpu-bundle`: writes .gpu-bundle/ (<= 40 MiB)
    python3 analysis/gpu_bundle.py check            # the load test: the packed modules reach plan()
    python3 analysis/gpu_bundle.py activate DIR     # on the GPU host: unpack into DIR, write DIR/env.sh

``build`` runs on a CPU machine with CUDA 13.0's nvcc (``CUDA_HOME``, default
/usr/local/cuda-13.0) and gcc: a build environment of pinned versions (.gpu-bundle-build/venv),
an empty ``libcuda.so`` stub (only its SONAME matters: the modules need DT_NEEDED libcuda.so.1
and the real driver provides it on the host), FlashInfer's own ninja build of each module
the cells use for sm_90a (``analysis/gpu_bundle_flashinfer.py``), the package trimmed to its
Python files plus the data files the modules' spec generators read, packed as tar.xz, and
the cp312 wheels the GPU host lacks. ``.gpu-bundle/manifest.json`` lists versions, sizes,
checksums, what each module is for and the load probe's result. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / ".gpu-bundle-build"
BUNDLE = REPO / ".gpu-bundle"
FLASHINFER = "0.7.2.post1"
TVM_FFI = "0.1.15.post2"
BUILD_TORCH = "2.13.0"  # the CPU build on this machine's disk; the modules do not link torch
BUILD_PINS = (f"torch=={BUILD_TORCH}", f"apache-tvm-ffi=={TVM_FFI}", "packaging", "requests",
              "nvidia-ml-py", "tqdm", "numpy", "ninja")
HOST_WHEELS = (f"apache-tvm-ffi=={TVM_FFI}",)  # the H200 image has torch, numpy, requests, tqdm...
HOST_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                  "manylinux_2_17_x86_64", "manylinux2014_x86_64")
ARCH_LIST = "9.0"  # FlashInfer makes it sm_90a
MAX_BUNDLE_BYTES = 40 << 20
ARCHIVE = f"flashinfer-{FLASHINFER}-sm90a.tar.xz"
HERE = Path(__file__).resolve().parent


class BundleError(Exception):
    """One paragraph: what failed, why, what to do."""


def say(text: str) -> None:
    print(f"gpu-bundle: {text}", flush=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run(command: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> str:
    """A build step; its output goes to LOG (when given) and its failure is one paragraph."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise BundleError(f"`{' '.join(command[:4])} ...` failed (exit {done.returncode}): "
                          + " | ".join(tail) + (f" (full log: {log})" if log else ""))
    return done.stdout


# ----------------------------------------------------------------------------- build environment


def venv_python() -> Path:
    return BUILD / "venv" / "bin" / "python"


def ensure_build_env() -> None:
    stamp = BUILD / "venv" / "ncuflow-pins.json"
    wanted = {"flashinfer-python": FLASHINFER, "pins": list(BUILD_PINS)}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return
    say("making the build environment (.gpu-bundle-build/venv)")
    run([sys.executable, "-m", "venv", str(BUILD / "venv")])
    pip = [str(venv_python()), "-m", "pip", "install", "-q"]
    run([*pip, *BUILD_PINS], log=BUILD / "logs" / "pip-pins.log")
    # the optional extras (cutlass-dsl, cuda-tile, cudnn...) are not needed for the modules here
    run([*pip, "--no-deps", f"flashinfer-python=={FLASHINFER}"], log=BUILD / "logs" / "pip-flashinfer.log")
    stamp.write_text(json.dumps(wanted))


def cuda_home() -> Path:
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0"))
    if not (home / "bin" / "nvcc").exists():
        raise BundleError(f"No nvcc at {home}/bin/nvcc: the bundle's modules are compiled with CUDA 13.0's "
                          "nvcc (the H200's driver is CUDA 13.0). Set CUDA_HOME to a CUDA 13.0 toolkit "
                          "(the nvidia-cuda-nvcc wheels work too).")
    return home


def make_stub() -> Path:
    """An empty shared library named libcuda.so.1: at link time only its SONAME matters."""
    stub = BUILD / "stub"
    stub.mkdir(parents=True, exist_ok=True)
    source = stub / "libcuda.c"
    source.write_text("/* stand-in for the NVIDIA driver at link time; the host's driver replaces it */\n")
    if shutil.which("gcc") is None:
        raise BundleError("gcc is not on PATH: the link-time libcuda stub and FlashInfer's host code need it. "
                          "Install gcc (apt-get install gcc g++).")
    run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub / "libcuda.so"), str(source)])
    link = stub / "libcuda.so.1"
    if not link.exists():
        link.symlink_to("libcuda.so")
    return stub


def build_env(stub: Path, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "FLASHINFER_CUDA_ARCH_LIST": ARCH_LIST,
        "FLASHINFER_WORKSPACE_BASE": str(BUILD / "workspace"),
        "FLASHINFER_JIT_DEBUG": "0",
        "CUDA_HOME": str(home),
        "PATH": f"{home / 'bin'}:{os.environ.get('PATH', '')}",
        "MAX_JOBS": os.environ.get("MAX_JOBS", "2"),
        # --no-as-needed: every module keeps DT_NEEDED libcuda.so.1, whether or not the stub
        # resolved a symbol (XQA calls the driver API directly)
        "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub} -Wl,--no-as-needed -lcuda",
    }


def probe_env(site: Path, stub: Path, home: Path) -> dict[str, str]:
    """Load the staged package with JIT off; the stub stands in for libcuda.so.1 at load time."""
    return {**build_env(stub, home), "FLASHINFER_DISABLE_JIT": "1", "PYTHONPATH": str(site),
            "LD_LIBRARY_PATH": f"{stub}:{home / 'lib64'}:{os.environ.get('LD_LIBRARY_PATH', '')}",
            "FLASHINFER_WORKSPACE_BASE": str(BUILD / "probe-workspace")}


# ----------------------------------------------------------------------------- stage, trim, pack


def site_packages() -> Path:
    found = sorted((BUILD / "venv" / "lib").glob("python3*/site-packages"))
    if not found:
        raise BundleError(f"No site-packages under {BUILD / 'venv'}; remove the folder and build again.")
    return found[0]


def stage(aot: Path) -> Path:
    """A copy of the installed flashinfer package (and its dist-info) with each module under data/aot."""
    site = BUILD / "stage"
    shutil.rmtree(site, ignore_errors=True)
    source = site_packages()
    shutil.copytree(source / "flashinfer", site / "flashinfer", ignore=shutil.ignore_patterns("__pycache__"))
    for info in source.glob("flashinfer_python-*.dist-info"):
        shutil.copytree(info, site / info.name)
    for module in sorted(aot.glob("*/*.so")):
        target = site / "flashinfer" / "data" / "aot" / module.parent.name / module.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module, target)
    return site


def trim(package: Path, opened: list[str]) -> dict[str, int]:
    """Keep every Python file outside data/, and of data/ only AOT modules and what the probe opened."""
    keep = {package / name for name in opened}
    removed = kept = 0
    for path in sorted(package.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(package)
        in_data = relative.parts[0] == "data"
        wanted = (path in keep or (in_data and relative.parts[1:2] == ("aot",))
                  or (not in_data and path.suffix in {".py", ".pyi", ".typed", ".json"}))
        if wanted:
            kept += 1
        else:
            path.unlink()
            removed += 1
    for folder in sorted((p for p in package.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()
    return {"files_kept": kept, "files_removed": removed}


def pack(site: Path, archive: Path) -> None:
    """tar.xz with sorted names, zero times and owners: the same inputs give the same bytes."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz", preset=6) as tar:
        for path in sorted(site.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(site)), filter=clean, recursive=False)


def download_wheels(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in HOST_PLATFORMS for arg in ("--platform", p)]
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(folder), *HOST_WHEELS],
        log=BUILD / "logs" / "pip-download.log")
    return sorted(folder.glob("*.whl"))


def library_facts(module: Path) -> dict[str, Any]:
    needed = []
    if shutil.which("readelf"):
        text = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True, check=False).stdout
        needed = [line.split("[")[1].rstrip("]") for line in text.splitlines() if "(NEEDED)" in line]
    return {"needed": needed}


def nvcc_version(home: Path) -> str:
    text = subprocess.run([str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True, check=False).stdout
    return text.strip().splitlines()[-1] if text.strip() else "unknown"


def probe(site: Path, stub: Path, home: Path, record: Path, python: Path | None = None) -> dict[str, Any]:
    run([str(python or venv_python()), str(HERE / "gpu_bundle_flashinfer.py"), "probe", str(record)],
        env=probe_env(site, stub, home), log=record.with_suffix(".log"))
    result: dict[str, Any] = json.loads(record.read_text())
    return result


def build() -> int:
    started = time.monotonic()
    home = cuda_home()
    ensure_build_env()
    stub = make_stub()
    aot = BUILD / "aot"
    say(f"compiling FlashInfer {FLASHINFER}'s modules for sm_90a with {nvcc_version(home)} (log: .gpu-bundle-build/logs/compile.log)")
    compiled = time.monotonic()
    run([str(venv_python()), str(HERE / "gpu_bundle_flashinfer.py"), "compile", str(aot)],
        env=build_env(stub, home), log=BUILD / "logs" / "compile.log")
    compile_seconds = time.monotonic() - compiled
    site = stage(aot)
    first = probe(site, stub, home, BUILD / "probe-untrimmed.json")
    trimmed = trim(site / "flashinfer", first["opened"])
    loaded = probe(site, stub, home, BUILD / "probe-trimmed.json")
    shutil.rmtree(BUNDLE, ignore_errors=True)
    pack(site, BUNDLE / ARCHIVE)
    wheels = download_wheels(BUNDLE / "wheels")
    manifest = _manifest(aot, home, trimmed, loaded, wheels, compile_seconds, time.monotonic() - started)
    (BUNDLE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = manifest["bundle_bytes"]
    if total > MAX_BUNDLE_BYTES:
        raise BundleError(f"The bundle is {total / 2**20:.1f} MiB, over its {MAX_BUNDLE_BYTES >> 20} MiB budget "
                          "(the GPU host takes at most 64 MiB a call, the tree included). Trim the package further.")
    say(f"wrote {BUNDLE.relative_to(REPO)}/ ({total / 2**20:.1f} MiB) in {manifest['build_seconds']:.0f} s "
        f"(compiling {compile_seconds:.0f} s)")
    return 0


def _manifest(aot: Path, home: Path, trimmed: dict[str, int], loaded: dict[str, Any], wheels: list[Path],
              compile_seconds: float, seconds: float) -> dict[str, Any]:
    modules = json.loads((aot / "modules.json").read_text())
    for module in modules:
        module.update(library_facts(aot / module["uri"] / f"{module['uri']}.so"))
    files = [BUNDLE / ARCHIVE, *wheels]
    return {
        "schema": 1,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "target": {"arch": "sm_90a", "FLASHINFER_CUDA_ARCH_LIST": ARCH_LIST, "gpu": "H100/H200 (compute capability 9.0)",
                   "host_python": "3.12 (cp312 wheels)", "driver": "CUDA 13.0 or newer (the modules need libcudart.so.13, from torch cu130)"},
        "versions": {"flashinfer-python": FLASHINFER, "apache-tvm-ffi": TVM_FFI, "nvcc": nvcc_version(home),
                     "build_torch": BUILD_TORCH, "build_python": sys.version.split()[0]},
        "modules": modules,
        "files": [{"name": str(f.relative_to(BUNDLE)), "bytes": f.stat().st_size, "sha256": sha256(f)} for f in files],
        "bundle_bytes": sum(f.stat().st_size for f in files),
        "trim": trimmed,
        "host_env": host_env_template(),
        "load_probe": {k: v for k, v in loaded.items() if k != "opened"},
        "build_seconds": round(seconds, 1),
        "compile_seconds": round(compile_seconds, 1),
    }


# ----------------------------------------------------------------------------- the GPU host


def host_env_template() -> dict[str, str]:
    """What a process on the GPU host needs, {site} and {work} filled by ``activate``."""
    return {"PYTHONPATH": "{site}", "FLASHINFER_DISABLE_JIT": "1", "FLASHINFER_CUDA_ARCH_LIST": ARCH_LIST,
            "FLASHINFER_WORKSPACE_BASE": "{work}/workspace", "FLASHINFER_JIT_DEBUG": "0"}


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / "manifest.json"
    if not path.is_file():
        raise BundleError(f"No bundle at {bundle} (no manifest.json). Run `make gpu-bundle` on a machine with "
                          "CUDA 13.0's nvcc (4-13 minutes on two cores, over 30 under load: before the device is "
                          "asked for), then carry the folder .gpu-bundle to the GPU host.")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text()[:1_000_000])
    except ValueError as error:
        raise BundleError(f"{path} is not JSON ({error}); rebuild the bundle with `make gpu-bundle`.") from None
    for entry in manifest.get("files", []):
        file = bundle / entry["name"]
        if not file.is_file() or file.stat().st_size != entry["bytes"] or sha256(file) != entry["sha256"]:
            raise BundleError(f"{file} is missing or differs from what {path} records (size or sha256): the "
                              "bundle was damaged in transit or rebuilt halfway. Rebuild it with `make gpu-bundle`.")
    return manifest


def unpack(bundle: Path, site: Path) -> dict[str, Any]:
    manifest = read_manifest(bundle)
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    with tarfile.open(bundle / ARCHIVE, "r:xz") as tar:
        tar.extractall(site, filter="data")
    return manifest


def activate(bundle: Path, into: Path) -> dict[str, str]:
    """Unpack the package, install the wheels beside it, write INTO/env.sh; return the variables."""
    site = into / "site"
    unpack(bundle, site)
    wheels = sorted(str(w) for w in (bundle / "wheels").glob("*.whl"))
    run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
         "--no-cache-dir", "--upgrade", "--target", str(site), *wheels], log=into / "pip-install.log")
    env = {k: v.format(site=site, work=into) for k, v in host_env_template().items()}
    if _torch_lacks_dlpack_exchange():
        env["TVM_FFI_DISABLE_TORCH_C_DLPACK"] = "1"  # else tvm-ffi tries to compile an addon (no network)
    env["PYTHONPATH"] = f"{site}:{REPO}" + (f":{os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else "")
    lines = [f"export {k}='{v}'" for k, v in env.items()]
    (into / "env.sh").write_text("\n".join(lines) + "\n")
    return env


def _torch_lacks_dlpack_exchange() -> bool:
    code = "import torch; print(hasattr(torch.Tensor, '__dlpack_c_exchange_api__') or hasattr(torch.Tensor, '__c_dlpack_exchange_api__'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    return done.stdout.strip() != "True"


def check(bundle: Path) -> int:
    """The load test on this machine: the packed package and modules, with the build env's tvm-ffi."""
    home = cuda_home()
    if not venv_python().exists():
        raise BundleError(f"No build environment at {BUILD / 'venv'}: `make gpu-bundle` makes it.")
    site = BUILD / "check-site"
    unpack(bundle, site)
    result = probe(site, make_stub(), home, BUILD / "probe-check.json")
    shutil.rmtree(site, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "opened"}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build .gpu-bundle/ (make gpu-bundle)")
    sub.add_parser("check", help="load the bundle here up to the driver")
    activate_parser = sub.add_parser("activate", help="on the GPU host: unpack into DIR and write DIR/env.sh")
    activate_parser.add_argument("into", type=Path)
    for name in ("check", "activate"):
        sub.choices[name].add_argument("--bundle", type=Path, default=BUNDLE)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return build()
        if args.command == "check":
            return check(args.bundle)
        env = activate(args.bundle, args.into)
        say(f"unpacked into {args.into}; `source {args.into / 'env.sh'}` sets: {', '.join(env)}")
        return 0
    except BundleError as error:
        print(f"gpu-bundle: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
