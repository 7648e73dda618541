"""The reliability suite: backpressure, chaos, crashes, a full disk, hostile clients, models and files."""
