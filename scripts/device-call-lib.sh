# Sourced by the scripts in docs/device-calls/ that run on the device machine: the steps each
# of them used to spell out.
#   unpack_payload ARCHIVE   binaries from one xz stream (tar) into /tmp/bins
#   ab_bench MODEL TESTS BINARY DEADLINE ROUND
#                            `g4 bench` of /tmp/g4-MODEL (bf16, graph decode, -r 3) with
#                            /tmp/bins/BINARY, only while $SECONDS < DEADLINE; the JSON to
#                            $OUT/MODEL-BINARY-ROUND.json and one line of tok/s to stdout
#   load_memory RUN…         each ab_bench run's ($OUT/RUN.json) GPU memory after load, a line each
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}

unpack_payload() {
  mkdir -p /tmp/bins
  python3 -c "import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall('/tmp/bins')" "$1"
  chmod +x /tmp/bins/*
}

ab_bench() {
  local model=$1 tests=$2 binary=$3 deadline=$4 round=$5
  [ "$SECONDS" -lt "$deadline" ] || { echo "skipped $model $binary round $round: $SECONDS s"; return; }
  local json=$OUT/$model-$binary-$round.json
  timeout 100 "/tmp/bins/$binary" bench --model "/tmp/g4-$model" --device cuda --dtype bf16 --tests "$tests" \
    --decode graph -r 3 --json > "$json" 2> /tmp/bench.err || { tail -3 /tmp/bench.err; return; }
  python3 - "$json" "$model round $round $binary" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
print(sys.argv[2], ", ".join("%s %.2f ± %.2f" % (m["test"], m["tokens_per_s_mean"], m["tokens_per_s_stddev"])
                             for m in (r["measurement"] for r in results)))
PY
}

load_memory() {
  local run
  for run in "$@"; do
    python3 -c "import json, sys; print(sys.argv[1], 'MiB after load', json.load(open(sys.argv[2]))['memory_mib']['after_load'])" \
      "$run" "$OUT/$run.json" 2>/dev/null || echo "$run: no bench JSON"
  done
}
