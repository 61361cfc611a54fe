# The profiling configurations the Python benches compare (bench/serving_work.sh,
# bench/instr_overhead.sh), in one place. Source it, then call
#   mlprof_config NAME OUT.mlprof
# which sets `wrap` (1: install the pass-through allocator wrapper, bench/py_alloc_passthrough.c)
# and the array `pre` (the command prefix: mlprof-run with its options, or nothing). NAME is one
# of unprofiled, passthrough, cpu (--no-memory), memory (the defaults), nosamples (memory on,
# interval 2^40: the wrappers without samples), nocopy (memory on, copies not sampled), 512K, 64K;
# a name ending in "@b" uses the mlprof build in $MLPROF_BUILD_DIR_B (an A/B of two builds).
# Returns 2 with a message for an unknown name.
mlprof_config() {
  local b=${MLPROF_BUILD_DIR:-$root/build}/bin
  case $1 in *@b) b=${MLPROF_BUILD_DIR_B:?"$1 needs MLPROF_BUILD_DIR_B"}/bin ;; esac
  local mr=("$b/mlprof-run" -q --no-html -o "$2")
  wrap=0 pre=()
  case ${1%@b} in
    unprofiled) ;;
    passthrough) wrap=1 ;;
    cpu) pre=("${mr[@]}" --no-memory --) ;;
    memory) pre=("${mr[@]}" --) ;;
    nosamples) pre=("${mr[@]}" --mem-interval 1099511627776 --) ;;
    nocopy) pre=(env MLPROF_COPY_INTERVAL=0 "${mr[@]}" --) ;;
    512K) pre=("${mr[@]}" --mem-interval 512K --) ;;
    64K) pre=("${mr[@]}" --mem-interval 64K --) ;;
    *) echo "${0##*/}: unknown configuration '$1'" >&2; return 2 ;;
  esac
}
