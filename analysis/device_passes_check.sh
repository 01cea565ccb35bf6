#!/bin/sh
# On a GPU host (the H200 device): do the passes ncuflow predicts match what ncu records?
# Profiles one small torch kernel with tier 1, tier 2 and the first decisive list (names the
# chip lacks dropped as `profile` drops them) and prints ncu's profiler__replayer_passes.
OUT=${OUT:-out/device_passes}; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
grep -h Model /proc/driver/nvidia/gpus/*/information
ncu --version | tail -1
python3 -m ncuflow passes > "$OUT/passes_local.txt" 2>&1; cat "$OUT/passes_local.txt"
printf 'import torch\nx = torch.ones(1 << 24, device="cuda")\ntorch.cuda.synchronize()\ny = x * 2\ntorch.cuda.synchronize()\n' > /tmp/k.py
for tier in 1 2 fields; do
  metrics=$(python3 -c "
import sys
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.history import FIRST_DECISIVE_METRICS
from ncuflow.read.metrics import decisive_metric_names
from ncuflow.profile.precheck import check_passes, metric_list
names = FIRST_DECISIVE_METRICS if '$tier' == 'fields' else decisive_metric_names(int('$tier'))
c = check_passes(NcuOptions(metric_set='none', extra_metrics=names), 'gh100')
keep = [n for n in names if n not in c.dropped]
from ncuflow.profile import passes, perfworks
with perfworks.load().evaluator('gh100') as ev:
    known, unknown = passes.known_names(ev, keep); p = passes.predict(ev, known)
print(perfworks.load().path, file=sys.stderr); print(f'tier $tier: predicted {p.counter_passes}+{p.sass_passes}, expected recorded {p.expected_recorded(\"2025.3\")}, dropped {unknown}', file=sys.stderr)
print(','.join(known))")
  timeout 90 ncu --target-processes all --clock-control none --launch-skip 1 --launch-count 1 --metrics "$metrics" \
    --export "$OUT/t$tier" --force-overwrite python3 /tmp/k.py > "$OUT/ncu_t$tier.log" 2>&1
  echo "ncu exit $? for tier $tier"; grep -E "ERROR|WARN|PROF" "$OUT/ncu_t$tier.log" | head -5
  ncu --import "$OUT/t$tier.ncu-rep" --page raw --csv --metrics profiler__replayer_passes 2>&1 | tail -1
done
