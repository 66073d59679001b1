#!/usr/bin/env bash
# Nsight Compute on the NF4 shuffle kernel (GPU machine, after gpu-session.sh's install; PYTHONPATH=/tmp/site:app):
#   bash docs/tools/ncu_nf4.sh OUT   -> OUT/ncu-details.txt, ncu-raw.csv, ncu-sass.csv (per-instruction
#   stall samples), nf4.ncu-rep. Clocks left alone (--clock-control none), as the device notes ask.
out=$1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
echo "ncu: $NCU"
timeout 300 "$NCU" --clock-control none --kernel-name regex:nf4_shfl \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters \
  -o "$out/nf4" -f python3 docs/tools/ncu_nf4_drive.py > "$out/ncu-run.log" 2>&1
echo "ncu rc=$?"; tail -5 "$out/ncu-run.log"
"$NCU" --import "$out/nf4.ncu-rep" --page details > "$out/ncu-details.txt" 2>&1
"$NCU" --import "$out/nf4.ncu-rep" --page raw --csv > "$out/ncu-raw.csv" 2>&1
"$NCU" --import "$out/nf4.ncu-rep" --page source --csv --print-source sass > "$out/ncu-sass.csv" 2>&1
