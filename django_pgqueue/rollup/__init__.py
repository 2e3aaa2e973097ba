"""The console's rollup: per-minute counts and histograms of finished work."""
