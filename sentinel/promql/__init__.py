"""PromQL: parse with promql-parser, check the supported subset, evaluate over a store."""
