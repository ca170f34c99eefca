"""Property-based tests of every parser at a trust boundary: only typed errors escape."""
