"""Plumbing every layer shares: guarded JSON reads and atomic writes, statistics, the HTTP stack."""
