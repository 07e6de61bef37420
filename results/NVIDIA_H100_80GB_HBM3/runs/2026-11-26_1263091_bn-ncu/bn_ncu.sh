export PYTHONPATH=.
python3 bn_ncu.py > /dev/null 2>&1   # tune first
timeout 300 ncu --clock-control none -k regex:"_bn_(stats|apply|bwd_reduce|bwd_dx)_kernel" --nvtx --nvtx-include "measure/" --launch-count 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats python3 bn_ncu.py > $OUT/bn_ncu.txt 2>&1
grep -E "_bn_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Waves Per SM|Grid Size|Block Size" $OUT/bn_ncu.txt | head -120
