"""Benchmarks that are part of the product: env speed now; suites, reports and compare later."""
