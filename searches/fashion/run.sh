#!/bin/bash
# Every Fashion-MNIST search figure of searches/README.md ("Fashion-MNIST: where the search matters",
# issue 42), from the repository root. Each step resumes where a killed run stopped.
#   bash searches/fashion/run.sh discriminate   # Adam against itself: 64 configurations x 2 seeds per space
#   bash searches/fashion/run.sh record         # the pools: 256 configurations x Adam, EvE, SGD per space
#   bash searches/fashion/run.sh record-from-end  # optional, beside record: trains the pools from their other end
#   bash searches/fashion/run.sh export         # write the pool files from what is recorded so far; PROFILE=R
#                                               # measures the seconds again, R trajectories per model shape and
#                                               # trainer (the recording's own seconds include its pauses)
#   bash searches/fashion/run.sh simulate       # the schedulers over the pools (seconds)
#   bash searches/fashion/run.sh audit          # the proxy audit of the pools (seconds)
# One CPU-hour is about 160 trajectories of 3,000 units on one thread here (Adam about 10 s, EvE 12 s).
set -euo pipefail
W=${FASHION_WORKDIR:-fashion-runs}
P=searches/pools
S=searches/fashion
export OMP_NUM_THREADS=1
case "${1:-}" in
  discriminate)
    for space in hp arch; do
      eve-search audit adult --task fashion-mnist --space fashion-$space --proxies adam --truth adam --seeds 0,1 \
        --configs 64 --budgets 100,300,900,2700,3000 --backward-ratio 2 --workdir $W/discriminate-$space \
        --json $S/discriminate-$space.json --quiet > $S/discriminate-$space.md &
    done
    wait ;;
  record)  # trains quietly; once both spaces are done, the same commands read the stores and write the tables
    record() {
      eve-search audit adult --task fashion-mnist --space fashion-$1 --proxies eve,adam,sgd_momentum \
        --truth adam --seeds 0 --configs 256 --budgets 100,300,900,2700,3000 --backward-ratio 2 \
        --workdir $W/pool-$1 --json $S/audit-$1.json "${@:2}"
    }
    for space in hp arch; do record $space --quiet & done
    wait
    for space in hp arch; do record $space > $S/audit-$space.md 2> /dev/null; done ;;
  record-from-end)  # a second process per space, from the last configuration down (export joins the two)
    for space in hp arch; do
      python searches/record_pools.py --task fashion-mnist --space fashion-$space --configs 256 \
        --trainers adam,eve,sgd_momentum --budgets 100,300,900,2700,3000 --backward-ratio 2 \
        --workdir $W/pool-$space-end --out $W/pool-$space-end.json.gz --from-end &
    done
    wait ;;
  export)
    for space in hp arch; do
      also=(); if [ -d $W/pool-$space-end ]; then also=(--also $W/pool-$space-end); fi
      python searches/record_pools.py --task fashion-mnist --space fashion-$space --configs 256 \
        --trainers adam,eve,sgd_momentum --workdir $W/pool-$space --out $P/fashion-$space.json.gz --export-only \
        --profile "${PROFILE:-0}" "${also[@]}" &
    done
    wait ;;
  simulate)  # each search seed searches half the pool (128 of 256), in cohorts of 32 and of 16
    for space in hp arch; do
      for trainer in adam eve; do
        eve-search bench scale --pool $P/fashion-$space.json.gz --trainer $trainer --cohort-size 32 --cohorts 4 \
          --workers 1,2,16 --json $S/scale-$space-$trainer.json > $S/scale-$space-$trainer.md
        eve-search bench scale --pool $P/fashion-$space.json.gz --trainer $trainer --cohort-size 16 --cohorts 8 \
          --workers 1,2,16 --json $S/scale-$space-$trainer-c16.json > $S/scale-$space-$trainer-c16.md
      done
    done ;;
  audit)
    for space in hp arch; do
      python searches/audit_pool.py --pool $P/fashion-$space.json.gz --proxies eve,adam,sgd_momentum \
        --json $S/pool-audit-$space.json > $S/pool-audit-$space.md
    done ;;
  *) echo "usage: bash searches/fashion/run.sh discriminate|record|record-from-end|export|simulate|audit" >&2; exit 2 ;;
esac
