# Interleaved rounds for the benches that compare configurations (bench/serving_work.sh,
# bench/gpu_launch_bound.sh): source it, define `one CONFIG` (prints "CONFIG value" lines), then
#   run_rounds ROUNDS RUNS_FILE CONFIG...
# runs every configuration once per round, the starting one rotating each round (slow drift of the
# machine is shared out), writes each printed line to RUNS_FILE prefixed with the round number,
# and shows it as "  round N CONFIG value".
run_rounds() {
  local rounds=$1 out=$2
  shift 2
  local configs=("$@") n=$# i k
  for ((i = 0; i < rounds; i++)); do
    for ((k = 0; k < n; k++)); do
      one "${configs[$(((i + k) % n))]}" | sed "s/^/$i /"
    done
  done | tee "$out" | sed 's/^/  round /'
}
