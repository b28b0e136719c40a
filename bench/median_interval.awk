# The median of the numbers read (one a line, sorted ascending) and a distribution-free
# interval for it: [v(k), v(n+1-k)] with the largest k whose binomial tail P(X <= k-1),
# X ~ Bin(n, 1/2), is at most 2.5 %, so that the interval covers the median with probability
# 1 - 2 P(X <= k-1) >= 95 % (the exact order-statistics interval; printed, as it is above 95 %
# for most n). Fewer than 6 numbers cannot give 95 %: the interval is then their range.
# Usage: sort -g | awk -v what=LABEL -v unit=UNIT -v fmt=%+.2f -f bench/median_interval.awk
{ v[NR] = $1 }
END {
  n = NR
  if (n == 0) { printf "  %-42s no values\n", what; exit }
  med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  # P(X <= j) for j = 0, 1, ...: the binomial coefficients, scaled by 2^-n as they go
  p = 2 ^ -n; cdf = p; k = 1; tail = p
  for (j = 1; j <= n / 2; j++) {
    if (cdf > 0.025) break
    k = j; tail = cdf
    p = p * (n - j + 1) / j; cdf += p
  }
  if (tail > 0.025) { k = 1; tail = 2 ^ -n }
  printf "  %-42s median " fmt " %s, %.1f %% interval [" fmt ", " fmt "] %s\n", what, med, unit,
    (1 - 2 * tail) * 100, v[k], v[n + 1 - k], unit
}
