#!/usr/bin/env bash
# Try nvFuser (through Lightning Thunder) on a GPU host that has no internet, with wheels carried
# there, and say exactly why it does not load if it does not.
#
#   scripts/try_nvfuser.sh WHEEL_DIR [TARGET_DIR] [PYTHON]
#
# WHEEL_DIR holds what `pip download` fetched on a machine with internet (2026-11-22):
#   nvfuser_cu130_torch210-0.2.36.dev20260301-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl (80.2 MB;
#     pypi.org's `nvfuser-cu130` is a stub that downloads from pypi.nvidia.com; there is no
#     nvfuser-cu130-torch211: this wheel is built against torch 2.10's C++ ABI and links
#     libtorch.so, libc10.so, libtorch_cuda.so, libtorch_python.so)
#   lightning_thunder-0.2.6-py3-none-any.whl and its pure-Python dependencies: looseversion,
#     lightning_utilities, networkx, optree (cp312), opt_einsum, dill
# The wheels go into TARGET_DIR (default /tmp/nvfuser-try) with `pip install --no-deps --target`,
# which is put in front of PYTHONPATH; the host's torch (2.11+cu130) is used as installed.
# Prints, for each step, OK or the exact error (the ImportError / undefined-symbol line that an ABI
# mismatch gives), then a LayerNorm backward in float32 and bfloat16 through thunder.jit with the
# nvFuser executor, each gradient's RMSE vs float64 beside eager's. Exit 0 when nvFuser ran.
set -u
WHEELS=${1:?usage: try_nvfuser.sh WHEEL_DIR [TARGET_DIR] [PYTHON]}
TARGET=${2:-/tmp/nvfuser-try}
PY=${3:-python3}
mkdir -p "$TARGET"
echo "== torch on this host"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))" || exit 2
if [ -f "$WHEELS/nvf.tar.xz" ]; then
  # The carried form (the wheels are over the 64 MiB carry limit): the wheels unpacked without the
  # bundled libnvrtc (the host's CUDA 13 NVRTC, which torch cu130 brings, stands in for it) and
  # without headers, as one tar.xz.
  echo "== unpack $WHEELS/nvf.tar.xz into $TARGET"
  tar xJf "$WHEELS/nvf.tar.xz" -C "$TARGET" && TARGET="$TARGET/site"
  want=$(readelf -d "$TARGET"/nvfuser_common/lib/libnvfuser_codegen.so 2>/dev/null | grep -o 'libnvrtc-[^]]*' | head -1)
  host=$(find / -name 'libnvrtc.so.13*' -not -path '*/proc/*' 2>/dev/null | head -1)
  echo "== NVRTC: the wheel wants ${want:-?}; the host has ${host:-none}"
  [ -n "$want" ] && [ -n "$host" ] && ln -sf "$host" "$TARGET/nvfuser_cu130_torch210.libs/$want"
else
  echo "== pip install --no-deps --target $TARGET"
  "$PY" -m pip install --no-deps --no-index --target "$TARGET" "$WHEELS"/*.whl 2>&1 | tail -3
fi
export PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PY'
import sys, traceback

def step(name, fn):
    try:
        out = fn()
        print(f"== {name}: OK{(' ' + str(out)) if out is not None else ''}")
        return True
    except BaseException as e:  # ImportError, OSError (undefined symbol), RuntimeError
        print(f"== {name}: FAILED {type(e).__name__}: {e}")
        print("   " + "   ".join(traceback.format_exception_only(type(e), e)).strip())
        return False

def imp_direct():
    import nvfuser_direct
    return getattr(nvfuser_direct, "__version__", "")

def imp_legacy():
    import nvfuser
    return getattr(nvfuser, "__version__", "")

ok_direct = step("import nvfuser_direct", imp_direct)
ok_legacy = step("import nvfuser", imp_legacy)
if not (ok_direct or ok_legacy):
    print("nvFuser does not load with this torch: the lines above are the exact reasons")
    sys.exit(1)
if not step("import thunder", lambda: __import__("thunder").__version__):
    sys.exit(1)

import torch, thunder
from thunder.executors.nvfuserex import nvfuserex

def layer_norm_bwd(dtype):
    torch.manual_seed(0)
    x = torch.randn(128, 200, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(200, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(200, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(128, 200, device="cuda", dtype=dtype)
    f = lambda x, w, b: torch.nn.functional.layer_norm(x, (200,), w, b, 1e-5)
    jf = thunder.jit(f, executors=[nvfuserex])
    grads = {}
    for name, fn, args in (("eager", f, (x, w, b)), ("nvfuser", jf, (x, w, b)),
                           ("fp64", f, tuple(t.detach().double().requires_grad_() for t in (x, w, b)))):
        out = fn(*args)
        grads[name] = torch.autograd.grad(out, args, g.to(out.dtype))
    names = ("grad:x", "grad:w", "grad:b")
    rmse = lambda a, r: (a.double() - r).pow(2).mean().sqrt().item()
    fusions = [str(t) for t in thunder.last_traces(jf)[-1].bound_symbols if "nvFusion" in str(t.sym.name)][:1]
    for i, n in enumerate(names):
        print(f"   {dtype} {n}: RMSE vs fp64 eager {rmse(grads['eager'][i], grads['fp64'][i]):.3g}, "
              f"nvfuser {rmse(grads['nvfuser'][i], grads['fp64'][i]):.3g}")
    return f"nvFusion regions in the forward trace: {len(fusions) > 0}"

ran = [step(f"LayerNorm backward {d} through thunder.jit + nvFuser", lambda d=d: layer_norm_bwd(d))
       for d in (torch.float32, torch.bfloat16)]
sys.exit(0 if all(ran) else 1)
PY
rc=$?
if [ $rc -eq 0 ] && "$PY" -c "import divfuzz.fuzzer.engine.own_backends" 2>/dev/null; then
  echo "== divfuzz: replay a LayerNorm backward spec, nvfuser against inductor"
  "$PY" -c "from divfuzz.fuzzer.cli.main import main; main()" replay corpus/specs/norm-linear-float32-bwd.json --device cuda --backend nvfuser --against inductor | tail -4
fi
exit $rc
