set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -x tests/test_sgd.py tests/test_foreach_cast.py -k "narrow or gpu" 2>&1 | tail -3
timeout 380 python3 probe/grads_ab.py 2>&1 | grep -E "^\[ab\]|===|stepgraph +[0-9]|Error|error" | grep -v -i warn
