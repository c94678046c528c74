"""Coverage-guided fuzzing of the decoders of untrusted bytes (see targets.py and run.py)."""
