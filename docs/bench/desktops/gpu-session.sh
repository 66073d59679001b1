#!/usr/bin/env bash
# The Holotron runtime on the lent H200: every GPU test, then ONE bench call (floors, 1080p step, history 1 and 8,
# an 8-step episode, a step with a 300-token thought plus the action, and the product path: HolotronPolicy.propose
# at 1080p, 8 episode steps with history cleaning from step 4, then a second task's first step). Run from the repo
# root on the GPU machine with the carried wheels in .whl4 (transformers 5.23.0, xgrammar 0.2.9 and its pydantic / tvm-ffi needs,
# the mamba-ssm 2.3.2.post1 sdist) and, for PARTS=quant, .whlq (bitsandbytes). ../shared/tools/gpu-wheels.sh builds
# .whl4; add `python3 -m pip download --no-deps -d .whl4 confusable-homoglyphs mistral-common==1.13.1` (the
# autopilot's word matching, imported by the policy package; the tekken stand-in tokenizer's data file) and `keyring
# jaraco.classes jaraco.functools jaraco.context more-itertools backports.tarfile importlib-metadata zipp lazy-importer
# rich pygments markdown-it-py mdurl secretstorage jeepney` (holodesk.doctor, which a GPU test imports, loads the
# keychain module at import).
#   bash docs/bench/desktops/gpu-session.sh [OUT] [PARTS]    PARTS: comma list of tests, bench, probe, nativetests, quanttests, quant, coldstart, readers, families (default tests,bench;
#   GPU_TESTS_K: a pytest -k filter for the tests part; GPU_TESTS_PATHS: its test folders/files; QUANT: the quant modes; FAMILIES: --family keys; COLD_ARGS: more cold-start flags; COLD_RUNS: its runs (default warm,cold,warm);
#   TOKENIZER: test or tekken for the bench and quant parts, default tekken when .whl4 holds the mistral-common wheel)
# Each part stays under 9 minutes (TESTS_S / BENCH_S lower the limits, e.g. to run both in one 10-minute call).
set -u
out=${1:-${OUT:-/tmp/holodesk-bench}}
part=${2:-tests,bench}
mkdir -p "$out"
rm -rf /tmp/site/mistral_common /tmp/site/mistral_common-*  # left on the import path by an earlier install
# mistral-common goes outside the import path (stand_in_tokenizer.TEKKEN_TARGET): transformers takes an importable
# mistral-common for its own tokenizer backend and fails on one installed without its dependencies
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .whl4/*.whl | grep -v mistral_common) \
    2>/dev/null || exit 1
if ls .whl4/mistral_common-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade \
        --target "$(python3 -c 'import sys; print(sys.prefix)')/bench-data" .whl4/mistral_common-*.whl || exit 1
fi
if [ -d .whlq ] && ls .whlq/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlq/*.whl || exit 1
fi
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE python3 -m pip install -q --no-index --no-deps \
    --no-build-isolation --target /tmp/site .whl4/mamba_ssm-*.tar.gz >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:app PYTHONUNBUFFERED=1
# The tekken stand-in tokenizer (Holotron's 131,072 ids: real prompt and reply lengths) when the mistral-common
# wheel travels in .whl4 (installed above with --no-deps: only its data file is read); else the test tokenizer.
tok=${TOKENIZER:-test}
if [ -z "${TOKENIZER:-}" ] && ls .whl4/mistral_common-*.whl >/dev/null 2>&1; then tok=tekken; fi
echo "bench tokenizer: $tok"
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
bench() {  # bench SECONDS ARGS: holodesk bench ARGS under a time limit (no console script on the GPU machine)
    timeout "$1" python3 -c 'import sys; from holodesk.bench.cli import main; sys.exit(main(sys.argv[1:]))' "${@:2}"
}
case ,$part, in *,tests,*)
    timeout "${TESTS_S:-540}" python3 -m pytest -q -rA -p no:cacheprovider -m gpu ${GPU_TESTS_PATHS:-tests/policy/holotron tests/bench tests/policy/native} \
        ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} -W ignore 2>&1 \
        | grep -v "warnings.warn\|UserWarning" > "$out/gpu-tests-full.log"
    grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$out/gpu-tests-full.log" | tail -150 | tee "$out/gpu-tests.log"
esac
case ,$part, in *,bench,*)
    bench "${BENCH_S:-540}" --sizes 1920x1080 --history 1,8 --episode-steps 8 --episode-repeats 2 --repeats 2 --no-stock \
        --profile --product --product-repeats 2 --product-steps 8 --think-tokens 300 --tokenizer "$tok" \
        --json "$out/bench.json" 2>&1 \
        | grep -v "Warning\|warn(" | cut -c1-600 | tee "$out/bench.log"
esac
case ,$part, in *,probe,*)  # where the product step's time goes (docs/bench/issue34/probe_product_step.py)
    timeout "${PROBE_S:-300}" python3 docs/bench/issue34/probe_product_step.py "$tok" "$out/probe.json" 2>&1 \
        | grep -v "Warning\|warn(" | cut -c1-3000 | tee "$out/probe.log"
esac
case ,$part, in *,nativetests,*)
    timeout "${NTESTS_S:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/native -W ignore 2>&1 \
        | grep -v "warnings.warn\|UserWarning" | tail -25 | tee "$out/gpu-native-tests.log"
esac
case ,$part, in *,quanttests,*)
    timeout "${QTESTS_S:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/policy/holotron/test_ops_quant.py -W ignore \
        --durations=5 2>&1 | grep -v "warnings.warn\|UserWarning" | tail -25 | tee "$out/gpu-quant-tests.log"
esac
case ,$part, in *,coldstart,*)
    # with bytecode written, as an installed Holodesk has it: the image sets PYTHONDONTWRITEBYTECODE=1 and ships
    # torch, sympy and numpy without it, so each process compiled ~2,200 modules from source (docs/benchmarks.md,
    # issue 34); the first process (warm) writes it, the runs after it are measured as a user's
    (unset PYTHONDONTWRITEBYTECODE
     bench "${COLD_S:-420}" --cold-start --cold-start-dir /var/tmp/holodesk-cold-start \
        --cold-start-runs "${COLD_RUNS:-warm,cold,warm}" --tokenizer "$tok" ${COLD_ARGS:-} --json "$out/cold-start.json" 2>&1 \
        | grep -v "Warning\|warn(" | cut -c1-900 | tee "$out/cold-start.log")
esac
case ,$part, in *,readers,*)  # readers reading beside a cold start's build (after coldstart wrote the checkpoint)
    (unset PYTHONDONTWRITEBYTECODE
     timeout "${READERS_S:-300}" python3 docs/bench/issue34/readers_beside.py /var/tmp/holodesk-cold-start \
        "$out/readers-beside.json" "${BESIDE:-1,2,4,8}" 2>&1 | grep -v "Warning\|warn(" | cut -c1-1500 \
        | tee "$out/readers-beside.log")
esac
case ,$part, in *,families,*)
    bench "${FAMILIES_S:-300}" --family "${FAMILIES:-all}" --eager --reply-tokens 64 --repeats 3 --json "$out/families.json" 2>&1 \
        | grep -v "Warning\|warn(" | cut -c1-900 | tail -30 | tee "$out/families.log"
esac
case ,$part, in *,quant,*)
    bench "${QUANT_S:-400}" --sizes '' --history '' --episode-steps 0 --no-stock --quant "${QUANT:-bf16,8bit,4bit}" \
        --think-tokens 300 --repeats 2 --tokenizer "$tok" --json "$out/quant.json" 2>&1 \
        | grep -v "Warning\|warn(" | cut -c1-900 | tee "$out/quant.log"
esac
