#!/usr/bin/env bash
# Issue 4 measurements on the lent H200 (docs/benchmarks.md). Run from the repo root on the GPU machine with
# the carried wheels in .whl4 (transformers 5.23.0, mamba-ssm 2.3.2.post1 sdist, xgrammar 0.2.8 and its
# pydantic / tvm-ffi needs) and, for the quantised run, .whlq (bitsandbytes 0.50.2).
#   bash docs/bench/issue4/gpu-session.sh PARTS [OUT]    PARTS: comma list of gemvtests, bench, product, tests, quant,
#   enginetest, prefill; or all (all = gemvtests, bench, product, tests, quant)
# Since issue 14 the bench lives in holodesk.bench (the runs 4-5 options --impl, --no-graphs, --compare-prefill and
# --profile-decode went with the decode and prefill variants they chose; --eager is the one switch left) and the
# product path is `holodesk bench --product`; the commands below are the current equivalents.
set -u
part=${1:-all}
out=${2:-${OUT:-/tmp/holodesk-bench}}
run=${RUN:-run5}  # prefix of the output files (runs 4a-4e used run4)
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl4/*.whl || exit 1
if [ -d .whlq ] && ls .whlq/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlq/*.whl || exit 1
fi
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE python3 -m pip install -q --no-index --no-deps \
    --no-build-isolation --target /tmp/site .whl4/mamba_ssm-*.tar.gz >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:app
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
bench() {  # bench SECONDS ARGS: holodesk bench ARGS under a time limit (no console script on the GPU machine)
    timeout "$1" python3 -c 'import sys; from holodesk.bench.cli import main; sys.exit(main(sys.argv[1:]))' \
        "${@:2}"
}
case ,$part, in *,gemvtests,*|*,all,*)
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/holotron/test_gemv.py 2>&1 | tail -8 \
        | tee "$out/$run-gemv-tests.log"
esac
case ,$part, in *,bench,*|*,all,*)
    bench 300 --sizes 1280x720,1920x1080,2560x1440 --history 1,8 --episode-steps 8 --repeats 3 \
        --json "$out/$run-bench.json" 2>&1 | grep -v "Warning\|warn(" | tee "$out/$run-bench.log"
esac
case ,$part, in *,product,*|*,all,*)
    bench 200 --sizes '' --history '' --episode-steps 0 --no-stock --product --product-repeats 3 --product-steps 4 \
        --json "$out/$run-product.json" > "$out/$run-product.log" 2>&1
    grep -v "^ \|^{\|^}\|Warning\|warn(" "$out/$run-product.log" | tail -40
esac
case ,$part, in *,tests,*|*,all,*)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/holotron 2>&1 | tail -15 \
        | tee "$out/$run-gpu-tests.log"
esac
case ,$part, in *,quant,*|*,all,*)
    bench 170 --sizes 1920x1080 --history '' --episode-steps 0 --no-stock --no-floors --repeats 1 \
        --quant 8bit,4bit --json "$out/$run-quant.json" 2>&1 | tee "$out/$run-quant.log"
esac
case ,$part, in *,prefill,*)  # run 5: the fused prefill path, its GPU tests and a same-process A/B
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/holotron/test_prefill_ops.py \
        tests/policy/holotron/test_engine.py 2>&1 | tail -8 | tee "$out/$run-prefill-tests.log"
    bench 240 --sizes 1920x1080 --history '' --episode-steps 0 --no-stock --repeats 3 \
        --json "$out/$run-prefill.json" 2>&1 | grep -v "Warning\|warn(" | tee "$out/$run-prefill.log"
esac
case ,$part, in *,enginetest,*)
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/holotron/test_engine.py 2>&1 | tail -8 \
        | tee "$out/$run-engine-test.log"
esac
