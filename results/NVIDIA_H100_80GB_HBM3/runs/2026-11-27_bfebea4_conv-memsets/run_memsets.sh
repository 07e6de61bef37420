set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
for s in bench heur det heur-det; do python3 probe/conv_memsets.py $s 2>&1 | grep -v -i warn; done
