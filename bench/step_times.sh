# Shell functions the step-time scripts source (bench/step_overhead.sh, bench/embedding_route_steps.sh).

step_ms() {  # metrics.jsonl -> one step time in ms per line, after step 20
  grep -v '"eval"' "$1" | sed -E 's/.*"elapsed_s":([0-9.eE+-]+).*/\1/' |
    awk 'NR > 21 { print ($1 - prev) * 1000 } { prev = $1 }'
}
median() { sort -g | awk '{ v[n++] = $1 } END { print v[int(n / 2)] }'; }
