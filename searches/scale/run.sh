#!/bin/bash
# Every table and chart of searches/README.md, "Scale: no idle worker", from the recorded pools.
# Simulated seconds do not depend on this machine's load. Run from the repository root:
#   bash searches/scale/run.sh
set -euo pipefail
P=searches/pools
S=searches/scale
for trainer in adam eve; do
  eve-search bench scale --pool $P/adult-arch.json.gz --trainer $trainer --cohorts 10 \
    --json $S/adult-arch-$trainer.json --svg $S/adult-arch-$trainer-utilisation.svg > $S/adult-arch-$trainer.md
done
hp=$(python -c "from eve_search.engine.pool import load_pool; print(load_pool('$P/adult-hp.json.gz').size // 48)")
eve-search bench scale --pool $P/adult-hp.json.gz --trainer adam --cohorts "$hp" \
  --json $S/adult-hp-adam.json > $S/adult-hp-adam.md
# Longer searches at 16 workers: the pool's configurations drawn with replacement.
: > $S/adult-arch-adam-longer.md
for shape in "48 10" "48 20" "48 40" "96 20" "192 10"; do
  set -- $shape
  echo "cohorts of $1 x $2 (drawn with replacement)" >> $S/adult-arch-adam-longer.md
  eve-search bench scale --pool $P/adult-arch.json.gz --trainer adam --cohort-size "$1" --cohorts "$2" \
    --with-replacement --workers 16 --methods stream,stream+spec,sha-all,asha-optuna,hyperband-optuna,asha-ray \
    >> $S/adult-arch-adam-longer.md
done
