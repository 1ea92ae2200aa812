#!/usr/bin/env bash
# A generated-scenario campaign split into shards that run side by side, one per core:
#
#   scripts/campaign.sh ZEROSIM SEED CASES SHARDS FIRST LAST OUT
#
# runs shards FIRST..LAST (of SHARDS) of `ZEROSIM fuzz --seed SEED --cases CASES`: shard I takes
# the cases whose index is I modulo SHARDS, so the shards of one campaign never run the same
# case, and running every shard (in one call or several) runs the whole campaign. Each shard's
# output goes to OUT/shard-I.log (a failure is shrunk, at most 50 runs, into
# OUT/failures-I/); OUT/summary-FIRST-LAST.txt gets each shard's last lines and the wall time.
# Exit status 1 when any shard failed a case, 2 when a shard could not run.
set -uo pipefail
[ $# -eq 7 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
zerosim=$1 seed=$2 cases=$3 shards=$4 first=$5 last=$6 out=$7
for value in "$seed" "$cases" "$shards" "$first" "$last"; do
  [[ $value =~ ^[0-9]+$ ]] || { echo "campaign.sh: expected a non-negative integer, found '$value'" >&2; exit 2; }
done
[ -x "$zerosim" ] || { echo "campaign.sh: $zerosim is not an executable" >&2; exit 2; }
((first <= last && last < shards)) || { echo "campaign.sh: shards $first..$last are not within 0..$((shards - 1))" >&2; exit 2; }
mkdir -p "$out" || exit 2
started=$(date +%s)
for ((i = first; i <= last; i++)); do
  ("$zerosim" fuzz --seed "$seed" --cases "$cases" --shard "$i/$shards" --shrink-attempts 50 \
     --failures-dir "$out/failures-$i" >"$out/shard-$i.log" 2>&1
   echo "exit $?" >>"$out/shard-$i.log") &
done
wait
summary="$out/summary-$first-$last.txt"
: >"$summary"
status=0
for ((i = first; i <= last; i++)); do
  tail -n 2 "$out/shard-$i.log" | sed "s|^|shard $i/$shards: |" >>"$summary"
  case $(tail -n 1 "$out/shard-$i.log") in
    "exit 0") ;;
    "exit 1") ((status < 1)) && status=1 ;;
    *) status=2 ;;
  esac
done
echo "wall $(($(date +%s) - started)) s for shards $first..$last of $shards (seed $seed, $cases cases)" >>"$summary"
cat "$summary"
exit "$status"
