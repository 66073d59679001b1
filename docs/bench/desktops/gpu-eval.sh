#!/usr/bin/env bash
# `holodesk eval` on the lent GPU machine (issue 33, item 6), in one call: the harness's disposable desktop from the
# Debian packages carried in .xroot/ (gpu-eval-bundle.sh builds it), the tiny checkpoints, then the same tasks twice:
#   1. the local path: the tiny Holotron on the GPU (the static decoder), --out OUT/eval-local;
#   2. a loopback OpenAI-compatible server, `transformers serve` on 127.0.0.1, serving a tiny random checkpoint of a
#      family Holodesk supports (SERVE_FAMILY, default qwen3_vl: Holo2) through the remote policy,
#      --out OUT/eval-remote (if that server does not come up, a tiny LLaVA, which Holodesk does not list, is served
#      instead: said in the log and the summary);
# then `holodesk eval compare` and a summary (tasks, passed, steps, ms per step, reply tokens, device).
# Random weights: the figures say nothing of accuracy; they prove that the harness runs each path end to end. The
# local path decodes under the contract's grammar, so its random replies parse unless cut at the cap; transformers
# serve ignores response_format, so a remote task ends at its first step with the reply cut off at the token limit
# (failure class "error"): the request, frame included, went to the server and its reply came back into Holodesk's
# error types.
#
#   bash docs/bench/desktops/gpu-eval.sh OUT [BACK]
# BACK (optional; on the device machine $OUT): where the few files that come back are copied at the end: summary.txt,
# gpu-eval.log, compare.txt and gpu-eval.tgz (both reports and HTML pages, the episodes with their frames, the logs).
# Run from the repository root, .xroot/ carried. Nothing is unpacked into /: the packages go to XROOT (default
# /opt/holodesk-xroot); the one thing added outside it is /usr/bin/xkbcomp (Xvfb runs its compiled-in path), a link
# made only where no file is. PATH, LD_LIBRARY_PATH and the desktop's data paths are set for the eval commands
# only. Limits: TOTAL_S (default 500 s: the whole script stays under 9 minutes), within it EVAL_S per eval run
# (default 200 s; 900 s on the CPU, where TOTAL_S defaults to 2400 s) and SERVE_START_S (90 s) for the server to
# answer; REPLY_TOKENS caps each reply (HOLODESK_MAX_REPLY_TOKENS, default 512).
# TASKS: the task regular expressions (default: three xterm tasks; xterm is the program the bundle carries).
# HOLODESK_EVAL_CPU=1: the same steps on a CPU machine (the proof on the development machine): the current Python
# environment instead of the carried wheels, the model and the server on the CPU, one task by default. With
# HOLODESK_EVAL_HIDE_HOST=1 as well (root, unshare), it runs in a private mount namespace where the host's xkb data,
# Mesa drivers, D-Bus configuration, fonts, openbox configuration and themes and X resource files are hidden (an
# empty folder mounted over each) and /usr/bin/xkbcomp is the bundle's: as on the GPU image, only the bundle has them.
set -u
if [ "${HOLODESK_EVAL_HIDE_HOST:-0}" = 1 ] && [ -z "${HOLODESK_EVAL_IN_NAMESPACE:-}" ]; then
    exec unshare -m env HOLODESK_EVAL_IN_NAMESPACE=1 bash "$0" "$@"
fi
out=${1:?usage: gpu-eval.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(pwd)
xroot=${XROOT:-/opt/holodesk-xroot}
cpu=${HOLODESK_EVAL_CPU:-0}
back=${2:-}
eval_s=${EVAL_S:-$([ "$cpu" = 1 ] && echo 900 || echo 200)}
total_s=${TOTAL_S:-$([ "$cpu" = 1 ] && echo 2400 || echo 500)}
serve_start_s=${SERVE_START_S:-90}
reply_tokens=${REPLY_TOKENS:-512}
family=${SERVE_FAMILY:-qwen3_vl}
if [ "$cpu" = 1 ]; then
    device=cpu python=${PYTHON:-python3}
    read -r -a tasks <<< "${TASKS:-^xterm-echo-to-file$}"
else
    device=cuda python=$(command -v python3)
    read -r -a tasks <<< "${TASKS:-^xterm-echo-to-file$ ^xterm-make-folder$ ^xterm-count-lines$}"
fi
log() { echo "[gpu-eval $(date -u +%T)] $*" | tee -a "$out/gpu-eval.log"; }
started=$(date +%s)
deadline=$(( started + total_s ))
budget() {  # budget CAP RESERVE: CAP, or fewer seconds so that RESERVE seconds stay before the deadline (at least 10)
    local left=$(( deadline - $(date +%s) - $2 ))
    [ "$left" -lt "$1" ] && { [ "$left" -lt 10 ] && echo 10 || echo "$left"; } || echo "$1"
}

# 1. The desktop's packages, unpacked into the private prefix.
[ -d .xroot/debs ] || { log "no .xroot/debs: build it with docs/bench/desktops/gpu-eval-bundle.sh and carry .xroot"; exit 2; }
rm -rf "$xroot"
mkdir -p "$xroot"
for f in .xroot/debs/*.deb; do dpkg -x "$f" "$xroot" || { log "dpkg -x $f failed"; exit 2; }; done
lib=$xroot/usr/lib/x86_64-linux-gnu
# python-mss finds libxcb-randr & co. with ctypes.util.find_library: off the ld.so cache, through gcc (LIBRARY_PATH)
# or ld (LD_LIBRARY_PATH), which look for the unversioned names
for name in xcb-randr xcb-render xcb-shm xcb-xfixes; do ln -sf "lib$name.so.0" "$lib/lib$name.so"; done
# Xvfb runs xkbcomp from its compiled-in /usr/bin; the xkb data and dbus-daemon's session configuration are passed
# to them by the wrappers below
if [ -n "${HOLODESK_EVAL_IN_NAMESPACE:-}" ]; then
    empty=$(mktemp -d)
    for d in /usr/share/X11/xkb /usr/lib/x86_64-linux-gnu/dri /usr/share/dbus-1 /etc/fonts /usr/share/fonts \
             /etc/xdg/openbox /usr/share/themes /etc/X11/app-defaults; do
        [ -d "$d" ] && mount --bind "$empty" "$d" && log "hidden in this namespace: $d"
    done
    [ -e /usr/bin/xkbcomp ] && mount --bind "$xroot/usr/bin/xkbcomp" /usr/bin/xkbcomp \
        && log "in this namespace /usr/bin/xkbcomp is the bundle's"
elif [ ! -e /usr/bin/xkbcomp ] && [ ! -L /usr/bin/xkbcomp ]; then
    ln -s "$xroot/usr/bin/xkbcomp" /usr/bin/xkbcomp && log "linked /usr/bin/xkbcomp -> $xroot/usr/bin/xkbcomp"
else
    log "/usr/bin/xkbcomp exists: $(readlink -f /usr/bin/xkbcomp) (left as it is; Xvfb runs it)"
fi
mkdir -p "$xroot/holodesk-bin" "$xroot/fontconfig-cache"
cat > "$xroot/holodesk-bin/Xvfb" <<EOF
#!/bin/sh
exec "$xroot/usr/bin/Xvfb" -xkbdir "$xroot/usr/share/X11/xkb" "\$@"
EOF
cat > "$xroot/holodesk-bin/dbus-daemon" <<EOF
#!/bin/sh
# --session reads the compiled-in /usr/share/dbus-1/session.conf: the bundle's copy instead
for a; do shift; if [ "\$a" = --session ]; then set -- "\$@" "--config-file=$xroot/usr/share/dbus-1/session.conf"; else set -- "\$@" "\$a"; fi; done
exec "$xroot/usr/bin/dbus-daemon" "\$@"
EOF
chmod +x "$xroot/holodesk-bin/"*
cat > "$xroot/fonts.conf" <<EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig><dir>$xroot/usr/share/fonts</dir><cachedir>$xroot/fontconfig-cache</cachedir></fontconfig>
EOF
# The eval commands' environment (env -- "${desk_env[@]}" CMD): the bundle's programs and libraries first.
desk_env=(
    "PATH=$xroot/holodesk-bin:$xroot/usr/bin:$PATH"
    "LD_LIBRARY_PATH=$lib:$xroot/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "LIBRARY_PATH=$lib"
    "FONTCONFIG_FILE=$xroot/fonts.conf"
    "XDG_DATA_DIRS=$xroot/usr/share:/usr/local/share:/usr/share"
    "XDG_CONFIG_DIRS=$xroot/etc/xdg"
    "XFILESEARCHPATH=$xroot/etc/X11/%T/%N%C:$xroot/etc/X11/%T/%N"
)
for tool in Xvfb openbox dbus-daemon xprop xwininfo xdotool xterm; do
    where=$(env -- "${desk_env[@]}" sh -c "command -v $tool")
    case $where in
        "$xroot"/*) log "$tool: $where" ;;
        *) log "$tool resolves to '$where', not to the bundle in $xroot"; exit 2 ;;
    esac
done
log "desktop unpacked in $(( $(date +%s) - started )) s: $(du -sh "$xroot" | cut -f1) in $xroot"

# 2. Python: the carried wheels on a private import path (the GPU image has torch; .xroot/wheels the rest).
if [ "$cpu" = 1 ]; then
    log "CPU mode: $python from the current environment (the carried cp312 wheels are not installed)"
    pypath=$repo/app${PYTHONPATH:+:$PYTHONPATH}
else
    site=/tmp/holodesk-eval-site
    rm -rf "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .xroot/wheels/*.whl \
        > "$out/pip.log" 2>&1 || { log "pip install of .xroot/wheels failed (pip.log)"; exit 2; }
    if ls .xroot/wheels/mamba_ssm-*.tar.gz >/dev/null 2>&1; then
        MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE python3 -m pip install -q --no-index --no-deps \
            --no-build-isolation --target "$site" .xroot/wheels/mamba_ssm-*.tar.gz >> "$out/pip.log" 2>&1 \
            || { log "mamba-ssm install failed (pip.log)"; exit 2; }
    fi
    pypath=$site:$repo/app
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$out/gpu-eval.log"
fi
py() { PYTHONPATH=$pypath PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HOME=$out/hf "$python" "$@"; }
hd_eval() {  # hd_eval NAME RESERVE ARGS: holodesk eval desktop ARGS --out OUT/NAME under the desktop's environment,
    # for at most EVAL_S seconds, fewer when RESERVE seconds must stay for what follows
    local limit
    limit=$(budget "$eval_s" "$2")
    log "eval $1: at most $limit s"
    timeout -k 20 "$limit" env -- "${desk_env[@]}" PYTHONPATH="$pypath" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
        HF_HOME="$out/hf" HOLODESK_API_KEY=none HOLODESK_MAX_REPLY_TOKENS="$reply_tokens" "$python" -m holodesk eval desktop \
        --unattended --tasks "${tasks[@]}" --out "$out/$1" "${@:3}" > "$out/$1.log" 2>&1
    local rc=$?
    log "eval $1: exit $rc ($( (grep "^pass@1" "$out/$1.log" || tail -1 "$out/$1.log") | tail -1 | cut -c1-300))"
}
py - <<'EOF' 2>&1 | tee -a "$out/gpu-eval.log"
import importlib, importlib.util
for name in ("torch", "transformers", "mss", "pyautogui", "Xlib", "jeepney", "xgrammar", "fastapi", "uvicorn",
             "openai"):
    if name == "pyautogui":  # it opens the display at import: only found here
        spec = importlib.util.find_spec(name)
        print(f"{name} {spec.origin if spec else 'NOT FOUND'}")
        continue
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '')} {module.__file__}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
if importlib.util.find_spec("mouseinfo") and not importlib.util.find_spec("tkinter"):
    print("mouseinfo is installed without tkinter: pyautogui's import will exit (remove mouseinfo)")
import torch
print("torch.cuda.is_available():", torch.cuda.is_available())
EOF
env -- "${desk_env[@]}" PYTHONPATH="$pypath" "$python" -c 'import ctypes.util as u
found = {n: u.find_library(n) for n in ("xcb", "xcb-randr", "xcb-render", "xcb-shm", "xcb-xfixes")}
print("find_library:", found); raise SystemExit(None in found.values())' 2>&1 | tee -a "$out/gpu-eval.log"
[ "${PIPESTATUS[0]}" = 0 ] || { log "python-mss would not find its libraries"; exit 2; }

# 3. The tiny checkpoints.
ck=$out/checkpoints
mkdir -p "$ck" "$out/hf/hub"  # transformers serve's /v1/models scans the hub cache: it must exist
py -m holodesk tiny-checkpoint "$ck/tiny-holotron" >> "$out/checkpoints.log" 2>&1 \
    && py -m holodesk tiny-checkpoint "$ck/tiny-$family" --family "$family" >> "$out/checkpoints.log" 2>&1 \
    || { log "tiny-checkpoint failed (checkpoints.log)"; exit 2; }

# 4. The local path.
hd_eval eval-local 200 --model "$ck/tiny-holotron"

# 5. The loopback server, then the same tasks through the remote policy.
serve() {  # serve CHECKPOINT: start transformers serve on a free port; 0 once it answers /v1/models
    port=$(py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    PYTHONPATH=$pypath HF_HUB_OFFLINE=1 HF_HOME=$out/hf setsid "$python" -c \
        'import sys; from transformers.cli.transformers import main; sys.argv[0] = "transformers"; main()' \
        serve "$1" --host 127.0.0.1 --port "$port" --device "$device" --log-level info \
        >> "$out/serve.log" 2>&1 &
    server=$!
    local wait_s until
    wait_s=$(budget "$serve_start_s" 120)
    until=$(( $(date +%s) + wait_s ))
    while [ "$(date +%s)" -lt "$until" ]; do
        kill -0 "$server" 2>/dev/null || { log "transformers serve $1 exited (serve.log)"; return 1; }
        if py -c "import urllib.request as r; r.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null
        then return 0; fi
        sleep 1
    done
    log "transformers serve $1 did not answer in $wait_s s (serve.log)"
    kill -- -"$server" 2>/dev/null
    return 1
}
server=""
served=$ck/tiny-$family
served_note="tiny $family (a family Holodesk supports), transformers serve --device $device"
if ! serve "$served"; then
    kill -- -"$server" 2>/dev/null
    served=$ck/tiny-llava
    served_note="tiny LLaVA (not a Holodesk family: transformers serve could not serve the $family checkpoint), transformers serve --device $device"
    log "fallback: $served_note"
    py tests/policy/tiny_llava.py "$served" >> "$out/checkpoints.log" 2>&1 && serve "$served" || served=""
fi
if [ -n "$served" ]; then
    log "serving $served on 127.0.0.1:$port ($served_note)"
    hd_eval eval-remote 15 --endpoint "http://127.0.0.1:$port/v1" --model "$served"
    kill -- -"$server" 2>/dev/null
    wait "$server" 2>/dev/null
    log "the server answered $(grep -c '"POST /v1/chat/completions HTTP/1.1" 200' "$out/serve.log") chat requests with 200"
else
    log "no server came up: the remote run was skipped (serve.log)"
fi

# 6. Compare, and the summary.
if [ -f "$out/eval-local/report.json" ] && [ -f "$out/eval-remote/report.json" ]; then
    py -m holodesk eval compare "$out/eval-local/report.json" "$out/eval-remote/report.json" 2>&1 \
        | tee "$out/compare.txt"
fi
SERVED_NOTE=$served_note py - "$out" <<'EOF' 2>&1 | tee "$out/summary.txt"
import json, os, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("eval-local", "eval-remote"):
    path = out / name / "report.json"
    if not path.exists():
        print(f"{name}: no report (see {name}.log)")
        continue
    r = json.loads(path.read_text(encoding="utf-8"))
    s = r["summary"]
    steps = [st for a in r["attempts"] for st in a["step_records"]]
    policy_ms = [st["policy_ms"] for st in steps if isinstance(st.get("policy_ms"), (int, float))]
    policy = f"{sum(policy_ms) / len(policy_ms):.0f} ms" if policy_ms else "n/a: no reply parsed"
    runtime = r.get("runtime") or {}
    device = runtime.get("device") or ("the server's (" + os.environ["SERVED_NOTE"] + ")" if r.get("endpoint") else "n/a")
    if runtime.get("device_name"):
        device += f" ({runtime['device_name']})"
    tokens = "n/a" if s["mean_reply_tokens"] is None else f"{s['mean_reply_tokens']:.0f}"
    print(f"{name}: policy {r['policy']}, model {r['model']}; {s['tasks']} tasks, {s['passed_runs']}/{s['runs']} "
          f"passed, {sum(a['steps'] for a in r['attempts'])} steps, {s['mean_step_s'] * 1000:.0f} ms per step "
          f"(policy {policy}), {tokens} reply tokens per step, failures {s['failures']}; device {device}")
    for a in r["attempts"]:
        print(f"  {a['task']}: {'passed' if a['passed'] else a['failure']}: {a['reason'][:200]}")
EOF
for episode in "$out"/eval-local/episodes/*/episode.jsonl; do
    [ -f "$episode" ] || continue
    py -c 'import json, sys
step = next((json.loads(l) for l in open(sys.argv[1]) if "\"type\": \"step\"" in l), None)
extra = (step or {}).get("policy_extra") or {}
print("local runtime (first step of", sys.argv[1].split("/")[-2] + "): decoder", extra.get("decoder"), "|",
      extra.get("kernels"))' "$episode" | tee -a "$out/summary.txt"
    break
done
log "done in $(( $(date +%s) - started )) s"
if [ -n "$back" ]; then
    mkdir -p "$back"
    cp "$out"/summary.txt "$out"/gpu-eval.log "$back"/ 2>/dev/null
    [ -f "$out/compare.txt" ] && cp "$out/compare.txt" "$back"/
    tar -C "$out" --exclude=./checkpoints --exclude=./hf -czf "$back/gpu-eval.tgz" . \
        && log "$back/gpu-eval.tgz: $(du -h "$back/gpu-eval.tgz" | cut -f1)"
fi
