#!/usr/bin/env bash
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name --format=csv,noheader
M=gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
timeout 400 ncu --profile-from-start off --nvtx --metrics $M --csv --print-units base python conv_l2.py > $OUT/conv_l2.csv 2> $OUT/conv_l2.err
echo "rc $?"; tail -5 $OUT/conv_l2.err; grep -c "" $OUT/conv_l2.csv
python - <<'PY'
import csv, os, collections
rows = list(csv.DictReader(open(os.environ["OUT"] + "/conv_l2.csv")))
k = collections.OrderedDict()
for r in rows:
    key = (r["ID"], r["Kernel Name"][:60], next((r[c] for c in r if "push" in c.lower() or "nvtx" in c.lower()), "")[-14:])
    k.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"]
for (i, name, rng), m in k.items():
    t = float(m["gpu__time_duration.sum"]) / 1e3
    l2 = float(m["lts__t_bytes.sum"]) / 1e6
    print(f"{i:>3} {rng:>14} {name:60} {t:8.1f} us  L2 {l2:8.1f} MB ({l2 / t:5.2f} TB/s, {m['lts__t_sectors.avg.pct_of_peak_sustained_elapsed']:>6}% peak)  "
          f"DRAM r/w {float(m['dram__bytes_read.sum'])/1e6:6.1f}/{float(m['dram__bytes_write.sum'])/1e6:6.1f} MB  tensor {m['sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active']:>6}%  SM {m['sm__throughput.avg.pct_of_peak_sustained_elapsed']:>6}%")
PY
